#!/usr/bin/env python3
"""Pack one static binary into an OCI image-layout tarball for `ctr images import`.

Usage: mkimage.py [--at PATH] [--file SRC:DEST]... BINARY IMAGE_NAME OUT.tar [ARG...]

The image holds BINARY as /<basename> (or PATH, e.g. /usr/local/bin/qosd as
in the Dockerfile) with mode 0755, plus each SRC at DEST (0644), in one gzip
layer; its config's Entrypoint is [that path] and Cmd is ARG... (may be
empty).
IMAGE_NAME (e.g. "qosd.test/pause:1") is recorded in index.json under the
`io.containerd.image.name` and `org.opencontainers.image.ref.name`
annotations, which `ctr -n k8s.io images import` uses as the image name.
Output is deterministic (fixed timestamps, owners and gzip header), so the
same binary always gives the same digests. Part of qosd's test support.
"""
import gzip
import hashlib
import io
import json
import os
import platform
import sys
import tarfile

ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x"}


def tar_bytes(members):
    """A deterministic tar of (name, bytes, mode) members."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in members:
            info = tarfile.TarInfo(name)
            info.mode = mode
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if data is None:  # a directory
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                continue
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def blob(data, media_type):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    return digest, {"mediaType": media_type, "digest": digest, "size": len(data)}


def main(argv):
    argv = list(argv)
    at, files = None, []
    while len(argv) > 1 and argv[1] in ("--at", "--file"):
        opt, val = argv[1], argv[2]
        del argv[1:3]
        if opt == "--at":
            at = val
        else:
            src, dest = val.split(":", 1)
            with open(src, "rb") as f:
                files.append((dest.lstrip("/"), f.read(), 0o644))
    if len(argv) < 4:
        sys.exit(__doc__)
    binary, name, out, args = argv[1], argv[2], argv[3], argv[4:]
    base = (at or "/" + os.path.basename(binary)).lstrip("/")
    with open(binary, "rb") as f:
        payload = f.read()

    entries = [(base, payload, 0o755)] + files
    dirs = sorted({"/".join(n.split("/")[:i]) for n, _, _ in entries for i in range(1, n.count("/") + 1)})
    layer_tar = tar_bytes([(d, None, 0o755) for d in dirs] + entries)
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, filename="") as g:
        g.write(layer_tar)
    layer = gz.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_tar).hexdigest()
    layer_digest, layer_desc = blob(layer, "application/vnd.oci.image.layer.v1.tar+gzip")

    arch = ARCH.get(platform.machine(), platform.machine())
    config = json.dumps(
        {
            "architecture": arch,
            "os": "linux",
            "config": {"Entrypoint": ["/" + base], "Cmd": args, "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created_by": "qosd tests/images/mkimage.py " + base}],
        },
        sort_keys=True,
    ).encode()
    config_digest, config_desc = blob(config, "application/vnd.oci.image.config.v1+json")

    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config_desc,
            "layers": [layer_desc],
        },
        sort_keys=True,
    ).encode()
    manifest_digest, manifest_desc = blob(manifest, "application/vnd.oci.image.manifest.v1+json")
    manifest_desc["platform"] = {"architecture": arch, "os": "linux"}
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    manifest_desc["annotations"] = {
        "io.containerd.image.name": name,
        "org.opencontainers.image.ref.name": tag,
    }
    index = json.dumps(
        {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [manifest_desc]},
        sort_keys=True,
    ).encode()

    members = [("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode(), 0o644), ("index.json", index, 0o644)]
    for digest, data in ((layer_digest, layer), (config_digest, config), (manifest_digest, manifest)):
        members.append(("blobs/sha256/" + digest.split(":", 1)[1], data, 0o644))
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(tar_bytes(members))
    os.replace(tmp, out)
    print(f"{name} {manifest_digest} -> {out}")


if __name__ == "__main__":
    main(sys.argv)
