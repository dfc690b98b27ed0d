#!/usr/bin/env python3
"""Checks the OCI archive `make image` wrote, without a container runtime.

verify.py ARCHIVE REF VERSION_LINE [LABEL=VALUE...]: the archive's index names REF; every blob it
reads matches its digest; the image config runs /celgate with `run` as user 65532:65532 and has
each LABEL with its VALUE; its one layer holds only
the celgate binary, which prints VERSION_LINE for `--version`, run from an otherwise empty root
(chroot, when run as root) so it needs no file beside it.
"""

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile


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


def main():
    if len(sys.argv) < 4:
        fail("usage: verify.py ARCHIVE REF VERSION_LINE [LABEL=VALUE...]")
    path, ref, version_line = sys.argv[1:4]
    labels = dict(a.split("=", 1) for a in sys.argv[4:])
    with tarfile.open(path) as archive:
        index = json.load(archive.extractfile("index.json"))
        manifests = index.get("manifests", [])
        if len(manifests) != 1:
            fail(f"index.json lists {len(manifests)} manifests, expected 1")
        name = manifests[0].get("annotations", {}).get("org.opencontainers.image.ref.name")
        if name != ref:
            fail(f"index.json names the image {name!r}, expected {ref!r}")
        manifest = json.loads(blob(archive, manifests[0]["digest"]))
        config = json.loads(blob(archive, manifest["config"]["digest"]))
        run = config.get("config", {})
        expected = {"User": "65532:65532", "Entrypoint": ["/celgate"], "Cmd": ["run"]}
        for key, want in expected.items():
            if run.get(key) != want:
                fail(f"config {key} is {run.get(key)!r}, expected {want!r}")
        for key, want in labels.items():
            got = (run.get("Labels") or {}).get(key)
            if got != want:
                fail(f"label {key} is {got!r}, expected {want!r}")
        if config.get("os") != "linux" or config.get("architecture") != "amd64":
            fail(f"image is {config.get('os')}/{config.get('architecture')}, expected linux/amd64")
        layers = manifest.get("layers", [])
        if len(layers) != 1:
            fail(f"the image has {len(layers)} layers, expected 1 (the binary)")
        with tarfile.open(fileobj=io.BytesIO(blob(archive, layers[0]["digest"]))) as layer:
            files = [m for m in layer.getmembers() if not m.isdir()]
            if [m.name.lstrip("./") for m in files] != ["celgate"]:
                fail(f"the layer holds {[m.name for m in files]}, expected only celgate")
            binary = layer.extractfile(files[0]).read()

    with tempfile.TemporaryDirectory(prefix="celgate-image-") as rootfs:
        target = os.path.join(rootfs, "celgate")
        with open(target, "wb") as f:
            f.write(binary)
        os.chmod(target, 0o755)
        os.chmod(rootfs, 0o755)
        command = [target, "--version"]
        if os.geteuid() == 0:
            command = ["chroot", "--userspec=65532:65532", rootfs, "/celgate", "--version"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if result.returncode != 0 or result.stdout.strip() != version_line:
            fail(f"{' '.join(command)} printed {result.stdout!r} {result.stderr!r}, "
                 f"exit code {result.returncode}; expected {version_line!r}")
    print(f"image/verify.py: {ref}: user {run['User']}, entrypoint {run['Entrypoint']}, "
          f"cmd {run['Cmd']}, one layer with /celgate; `{' '.join(command)}` printed {version_line!r}")


if __name__ == "__main__":
    main()
