#!/usr/bin/env python3
"""Writes a CycloneDX 1.5 JSON SBOM of the Rust crates in celgate's binary for one target.

sbom.py TRIPLE REVISION OUT: from `cargo metadata --locked --filter-platform TRIPLE` (the resolved
graph for that target) and Cargo.lock (the checksums): every package celgate reaches by normal
dependencies, that is what is compiled into the binary (dev- and build-dependencies are not), with
its version, licence expression, purl and SHA-256, and the dependency graph. Generated here rather
than with cargo-cyclonedx: cargo metadata holds all of it, and installing that tool means
compiling it (minutes on this machine) on every fresh clone.
"""

import json
import subprocess
import sys
import tomllib
import uuid

CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


def fail(message):
    sys.exit(f"image/sbom.py: {message}")


def main():
    if len(sys.argv) != 4:
        fail("usage: sbom.py TRIPLE REVISION OUT")
    triple, revision, out = sys.argv[1:]
    metadata = json.loads(subprocess.run(
        ["cargo", "metadata", "--locked", "--format-version", "1", "--filter-platform", triple],
        check=True, capture_output=True, text=True).stdout)
    with open(f"{metadata['workspace_root']}/Cargo.lock", "rb") as f:
        checksums = {(p["name"], p["version"]): p.get("checksum")
                     for p in tomllib.load(f)["package"]}
    packages = {p["id"]: p for p in metadata["packages"]}
    nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
    root = next((i for i, p in packages.items()
                 if p["name"] == "celgate" and i in metadata["workspace_members"]), None)
    if root is None:
        fail("cargo metadata lists no workspace package named celgate")

    def normal(dep):
        return any(kind["kind"] is None for kind in dep["dep_kinds"])

    reached, todo = {root}, [root]
    while todo:
        for dep in nodes[todo.pop()]["deps"]:
            if normal(dep) and dep["pkg"] not in reached:
                reached.add(dep["pkg"])
                todo.append(dep["pkg"])

    def ref(pid):
        p = packages[pid]
        return f"pkg:cargo/{p['name']}@{p['version']}"

    def component(pid):
        p = packages[pid]
        c = {"type": "application" if pid == root else "library", "bom-ref": ref(pid),
             "name": p["name"], "version": p["version"]}
        if p.get("description"):
            c["description"] = p["description"].strip()
        if p.get("license"):
            c["licenses"] = [{"expression": p["license"]}]
        if p["source"] == CRATES_IO:
            c["purl"] = ref(pid)
            checksum = checksums.get((p["name"], p["version"]))
            if not checksum:
                fail(f"Cargo.lock has no checksum for {p['name']} {p['version']}")
            c["hashes"] = [{"alg": "SHA-256", "content": checksum}]
        elif p["source"] is not None:
            fail(f"{p['name']} {p['version']} comes from {p['source']}, which this SBOM cannot name")
        else:
            c["purl"] = ref(pid)  # a crate of this workspace, built from the revision below
        if p.get("repository"):
            c["externalReferences"] = [{"type": "vcs", "url": p["repository"]}]
        return c

    main_component = component(root)
    main_component["properties"] = [{"name": "celgate:revision", "value": revision},
                                    {"name": "celgate:target", "value": triple}]
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'celgate/{revision}/{triple}')}",
        "version": 1,
        "metadata": {"component": main_component,
                     "tools": {"components": [{"type": "application", "name": "e2e/image/sbom.py"}]}},
        "components": [component(pid) for pid in sorted(reached - {root}, key=ref)],
        "dependencies": [{"ref": ref(pid),
                          "dependsOn": sorted(ref(d["pkg"]) for d in nodes[pid]["deps"] if normal(d))}
                         for pid in sorted(reached, key=ref)],
    }
    with open(out, "w") as f:
        json.dump(bom, f, indent=1)
        f.write("\n")
    print(f"image/sbom.py: {out}: {len(bom['components'])} crates for {triple}", file=sys.stderr)


if __name__ == "__main__":
    main()
