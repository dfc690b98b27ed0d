#!/usr/bin/env python3
"""Checks the OCI archive `make image` wrote, without a container runtime.

verify.py ARCHIVE REF VERSION_LINE SAMPLE LABEL=VALUE...: the archive's index.json names REF and
points at an image index listing exactly linux/amd64 and linux/arm64; every blob read matches its
digest; each image's config runs /celgate with `run` as user 65532:65532 and carries every
LABEL=VALUE as a label and as an annotation of its manifest; its one layer holds only the celgate
binary, for the image's architecture. Each binary is run from an otherwise empty root (chroot, when
run as root), the arm64 one under qemu-aarch64-static: `--version` prints VERSION_LINE, and
`check SAMPLE` exits 0 with the same output on both architectures.
"""

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

INDEX = "application/vnd.oci.image.index.v1+json"
# The images the index must hold: platform -> (ELF e_machine, emulator on an amd64 host).
PLATFORMS = {"amd64": (62, None), "arm64": (183, "qemu-aarch64-static")}


def fail(message):
    sys.exit(f"image/verify.py: {message}")


def blob(archive, digest):
    algorithm, hexdigest = digest.split(":", 1)
    if algorithm != "sha256":
        fail(f"unexpected digest algorithm in {digest}")
    data = archive.extractfile(f"blobs/sha256/{hexdigest}").read()
    if hashlib.sha256(data).hexdigest() != hexdigest:
        fail(f"blob {digest} does not match its digest")
    return data


def check_image(archive, arch, descriptor, labels):
    """The image's config, labels, annotations and layer; returns its binary."""
    manifest = json.loads(blob(archive, descriptor["digest"]))
    config = json.loads(blob(archive, manifest["config"]["digest"]))
    run = config.get("config", {})
    expected = {"User": "65532:65532", "Entrypoint": ["/celgate"], "Cmd": ["run"]}
    for key, want in expected.items():
        if run.get(key) != want:
            fail(f"{arch}: config {key} is {run.get(key)!r}, expected {want!r}")
    if (config.get("os"), config.get("architecture")) != ("linux", arch):
        fail(f"{arch}: config says {config.get('os')}/{config.get('architecture')}")
    annotations = manifest.get("annotations", {})
    for key, want in labels.items():
        if run.get("Labels", {}).get(key) != want:
            fail(f"{arch}: label {key} is {run.get('Labels', {}).get(key)!r}, expected {want!r}")
        if annotations.get(key) != want:
            fail(f"{arch}: manifest annotation {key} is {annotations.get(key)!r}, expected {want!r}")
    layers = manifest.get("layers", [])
    if len(layers) != 1:
        fail(f"{arch}: the image has {len(layers)} layers, expected 1 (the binary)")
    with tarfile.open(fileobj=io.BytesIO(blob(archive, layers[0]["digest"]))) as layer:
        files = [m for m in layer.getmembers() if not m.isdir()]
        if [m.name.lstrip("./") for m in files] != ["celgate"]:
            fail(f"{arch}: the layer holds {[m.name for m in files]}, expected only celgate")
        binary = layer.extractfile(files[0]).read()
    machine = int.from_bytes(binary[18:20], "little")
    if binary[:4] != b"\x7fELF" or machine != PLATFORMS[arch][0]:
        fail(f"{arch}: /celgate is not an ELF binary for {arch} (e_machine {machine})")
    return binary


def run_binary(arch, binary, sample):
    """Runs `--version` and `check SAMPLE` in a root holding only the binary (and the emulator)."""
    emulator = PLATFORMS[arch][1]
    outputs = []
    with tempfile.TemporaryDirectory(prefix="celgate-image-") as rootfs:
        os.chmod(rootfs, 0o755)
        target = os.path.join(rootfs, "celgate")
        with open(target, "wb") as f:
            f.write(binary)
        os.chmod(target, 0o755)
        shutil.copy(sample, os.path.join(rootfs, "sample.yaml"))
        prefix = []
        if emulator:
            path = shutil.which(emulator)
            if path is None:
                fail(f"{emulator} is missing: apt-get install qemu-user-static (e2e/image/deps.sh)")
            shutil.copy(path, os.path.join(rootfs, emulator))
            prefix = [f"/{emulator}"]
        for args in (["--version"], ["check", "/sample.yaml"]):
            if os.geteuid() == 0:
                command = ["chroot", "--userspec=65532:65532", rootfs, *prefix, "/celgate", *args]
            else:  # no chroot: the paths are under the temporary root
                command = [*(os.path.join(rootfs, p.lstrip("/")) for p in prefix), target,
                           *(os.path.join(rootfs, "sample.yaml") if a == "/sample.yaml" else a
                             for a in args)]
            result = subprocess.run(command, capture_output=True, text=True, timeout=120)
            if result.returncode != 0:
                fail(f"{arch}: {' '.join(command)} exited {result.returncode}: "
                     f"{result.stdout!r} {result.stderr!r}")
            outputs.append((" ".join(command), result.stdout.replace(rootfs, "")))
    return outputs


def main():
    if len(sys.argv) < 5:
        fail("usage: verify.py ARCHIVE REF VERSION_LINE SAMPLE [LABEL=VALUE...]")
    path, ref, version_line, sample = sys.argv[1:5]
    labels = dict(arg.split("=", 1) for arg in sys.argv[5:])
    binaries = {}
    with tarfile.open(path) as archive:
        top = json.load(archive.extractfile("index.json")).get("manifests", [])
        if len(top) != 1:
            fail(f"index.json lists {len(top)} manifests, expected 1 (the image index)")
        name = top[0].get("annotations", {}).get("org.opencontainers.image.ref.name")
        if name != ref:
            fail(f"index.json names {name!r}, expected {ref!r}")
        if top[0].get("mediaType") != INDEX:
            fail(f"{ref} is a {top[0].get('mediaType')}, expected an image index ({INDEX})")
        entries = json.loads(blob(archive, top[0]["digest"])).get("manifests", [])
        platforms = sorted((m.get("platform", {}).get("os"), m.get("platform", {}).get("architecture"))
                           for m in entries)
        if platforms != [("linux", arch) for arch in sorted(PLATFORMS)]:
            fail(f"the image index lists {platforms}, expected linux/amd64 and linux/arm64")
        for entry in entries:
            arch = entry["platform"]["architecture"]
            binaries[arch] = check_image(archive, arch, entry, labels)

    checks = {}
    for arch, binary in sorted(binaries.items()):
        (version_cmd, version), (check_cmd, check) = run_binary(arch, binary, sample)
        if version.strip() != version_line:
            fail(f"{arch}: `{version_cmd}` printed {version!r}, expected {version_line!r}")
        checks[arch] = check
        print(f"image/verify.py: {arch}: `{version_cmd}` printed {version.strip()!r}; "
              f"`{check_cmd}` exited 0: {check.strip()!r}")
    if checks["arm64"] != checks["amd64"]:
        fail(f"`check` printed {checks['arm64']!r} on arm64, {checks['amd64']!r} on amd64")
    print(f"image/verify.py: {ref}: an image index of linux/amd64 and linux/arm64, each with user "
          f"65532:65532, entrypoint /celgate, cmd run, one layer with /celgate, labels and "
          f"annotations {sorted(labels)}")


if __name__ == "__main__":
    main()
