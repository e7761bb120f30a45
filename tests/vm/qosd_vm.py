#!/usr/bin/env python3
"""Real cgroup v2 in a small VM: qemu + Debian's 6.1 kernel + a busybox initramfs.

Usage (see docs/cgroup-v2-vm.md):

  qosd_vm.py prepare
      Download (apt-get download) and unpack the kernel and busybox-static into
      the cache dir, extract the uncompressed vmlinux. Prints the cache paths.
  qosd_vm.py run --script FILE [--bin PATH]... [--file SRC:DEST]...
                 [--timeout SECS] [--mem MIB] [--smp N|TOPOLOGY] [--numa OPT]... [--cpu MODEL]
                 [--append ARGS]
                 [--log FILE] [--accel tcg|kvm]
      Boot a VM whose /init mounts proc, sysfs, devtmpfs, tmpfs /tmp and cgroup2
      on /sys/fs/cgroup, enables +cpu +memory +pids +io in the root's
      cgroup.subtree_control, then runs `sh /test/run.sh` (your script) with
      PATH=/test/bin:/bin; prints VMTEST_EXIT=<rc> and powers off.
      Binaries given with --bin land in /test/bin/<name> (static binaries, or
      ship their libraries with --file). The console output is streamed to
      stdout (and to --log). What the script writes to $VMTEST_RESULTS
      (/dev/ttyS1, a second serial port: no kernel messages interleaved) goes
      to the --results file.

Exit codes of `run`: the script's exit code; 124 timeout; 77 the VM cannot be
run here (qemu or the downloads unavailable: reason on stderr as
`VMHARNESS_SKIP: ...`); 125 harness failure (`VMHARNESS_ERROR: ...`).

Cache dir: $QOSD_VM_CACHE, else <repo>/target/vm-cache.
"""

import argparse
import glob
import inspect
import io
import json
import lzma
import os
import re
import shutil
import stat
import subprocess
import sys
import time

EXIT_SKIP = 77
EXIT_TIMEOUT = 124
EXIT_HARNESS = 125

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class Skip(Exception):
    pass


class HarnessError(Exception):
    pass


def cache_dir():
    d = os.environ.get("QOSD_VM_CACHE") or os.path.join(REPO, "target", "vm-cache")
    os.makedirs(d, exist_ok=True)
    return os.path.abspath(d)


def log(msg):
    print(f"[qosd-vm] {msg}", file=sys.stderr, flush=True)


def run(cmd, cwd=None):
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stdout, p.stderr


def has_candidate(pkg):
    rc, out, _ = run(["apt-cache", "policy", pkg])
    if rc != 0:
        return False
    m = re.search(r"Candidate:\s*(\S+)", out)
    return bool(m) and m.group(1) != "(none)"


def pick_kernel_package():
    if shutil.which("apt-cache") is None:
        raise Skip("apt-cache not found (not a Debian-like system)")
    rc, out, err = run(["apt-cache", "pkgnames", "linux-image-6.1"])
    names = [n for n in out.split() if re.fullmatch(r"linux-image-6\.1\.0-\d+-amd64(-unsigned)?", n)]
    if not names:
        raise Skip("no linux-image-6.1.0-*-amd64 package known to apt (run apt-get update)")

    def key(n):
        abi = int(re.search(r"6\.1\.0-(\d+)-", n).group(1))
        return (abi, 0 if n.endswith("-unsigned") else 1)

    for n in sorted(names, key=key, reverse=True):
        if has_candidate(n):
            return n
    raise Skip("no linux-image-6.1.0-*-amd64 package has a download candidate")


def apt_download(pkg, dest):
    """apt-get download PKG into dest; returns the .deb path."""
    existing = glob.glob(os.path.join(dest, f"{pkg}_*.deb"))
    if existing:
        return existing[0]
    os.makedirs(dest, exist_ok=True)
    # _apt must be able to write here when apt drops privileges; it falls
    # back to an unsandboxed download as root otherwise (a warning only).
    rc, out, err = run(["apt-get", "download", "-q", pkg], cwd=dest)
    debs = glob.glob(os.path.join(dest, f"{pkg}_*.deb"))
    if rc != 0 or not debs:
        raise Skip(f"apt-get download {pkg} failed (rc {rc}): {err.strip()[-400:]}")
    return debs[0]


def dpkg_extract(deb, dest):
    if os.path.isdir(dest) and os.listdir(dest):
        return dest
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    rc, out, err = run(["dpkg", "-x", deb, tmp])
    if rc != 0:
        raise HarnessError(f"dpkg -x {deb}: {err.strip()}")
    os.replace(tmp, dest)
    return dest


def extract_vmlinux(vmlinuz, out_path):
    """The uncompressed kernel ELF from a bzImage with an xz payload."""
    data = open(vmlinuz, "rb").read()
    magic = b"\xfd7zXZ\x00"
    pos = data.find(magic)
    while pos != -1:
        try:
            d = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
            elf = d.decompress(data[pos:])
            if elf[:4] == b"\x7fELF":
                tmp = out_path + ".tmp"
                with open(tmp, "wb") as f:
                    f.write(elf)
                os.replace(tmp, out_path)
                return out_path
        except lzma.LZMAError:
            pass
        pos = data.find(magic, pos + 1)
    raise HarnessError(f"no xz-compressed ELF payload found in {vmlinuz}")


def is_static_elf(path):
    try:
        data = open(path, "rb").read(1 << 16)
    except OSError:
        return False
    return data[:4] == b"\x7fELF" and b"/lib64/ld-linux" not in data and b"ld-linux" not in data


def prepare():
    """Ensure kernel and busybox are in the cache; return a dict of paths.
    Serialised by a lock file: parallel test runs share one cache."""
    import fcntl
    cache = cache_dir()
    with open(os.path.join(cache, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _prepare_locked(cache)


def _prepare_locked(cache):
    manifest = os.path.join(cache, "prepared.json")
    if os.path.exists(manifest):
        info = json.load(open(manifest))
        if all(os.path.exists(info[k]) for k in ("vmlinux", "busybox")):
            return info
    t0 = time.time()
    debs = os.path.join(cache, "debs")
    kpkg = pick_kernel_package()
    log(f"kernel package: {kpkg}")
    kdeb = apt_download(kpkg, debs)
    kdir = dpkg_extract(kdeb, os.path.join(cache, "kernel"))
    vmlinuz = sorted(glob.glob(os.path.join(kdir, "boot", "vmlinuz-*")))
    if not vmlinuz:
        raise HarnessError(f"no boot/vmlinuz-* in {kdeb}")
    vmlinux = extract_vmlinux(vmlinuz[-1], os.path.join(cache, "vmlinux"))
    try:
        bdeb = apt_download("busybox-static", debs)
        bdir = dpkg_extract(bdeb, os.path.join(cache, "busybox"))
        busybox = os.path.join(bdir, "bin", "busybox")
    except Skip as e:
        host = shutil.which("busybox")
        if host and is_static_elf(host):
            log(f"{e}; using the host's static {host}")
            busybox = host
        else:
            raise
    info = {
        "kernel_package": kpkg,
        "kernel_deb": kdeb,
        "vmlinuz": vmlinuz[-1],
        "vmlinux": vmlinux,
        "modules": os.path.join(kdir, "lib", "modules"),
        "busybox": busybox,
    }
    json.dump(info, open(manifest, "w"), indent=2)
    log(f"prepared in {time.time() - t0:.1f}s: {cache}")
    return info


# --- initramfs (newc cpio, written here: no cpio binary needed) ----------

class Cpio:
    def __init__(self):
        self.buf = io.BytesIO()
        self.ino = 1000
        self.seen = set()

    def _entry(self, name, mode, data=b"", nlink=1):
        self.ino += 1
        name_b = name.encode() + b"\x00"
        hdr = "070701" + "".join(
            f"{v:08x}"
            for v in (self.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name_b), 0)
        )
        self.buf.write(hdr.encode() + name_b)
        self._pad()
        self.buf.write(data)
        self._pad()

    def _pad(self):
        n = (-self.buf.tell()) % 4
        self.buf.write(b"\x00" * n)

    def dir(self, name):
        name = name.strip("/")
        parts = name.split("/")
        for i in range(1, len(parts) + 1):
            p = "/".join(parts[:i])
            if p and p not in self.seen:
                self.seen.add(p)
                self._entry(p, stat.S_IFDIR | 0o755, nlink=2)

    def file(self, name, data, mode=0o755):
        name = name.strip("/")
        self.dir(os.path.dirname(name))
        self.seen.add(name)
        self._entry(name, stat.S_IFREG | mode, data)

    def symlink(self, name, target):
        name = name.strip("/")
        self.dir(os.path.dirname(name))
        self.seen.add(name)
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def finish(self):
        self._entry("TRAILER!!!", 0)
        n = (-self.buf.tell()) % 512
        self.buf.write(b"\x00" * n)
        return self.buf.getvalue()


INIT = r"""#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox mount -t tmpfs tmpfs /tmp
/bin/busybox mount -t cgroup2 cgroup2 /sys/fs/cgroup
export PATH=/test/bin:/bin:/sbin HOME=/tmp TMPDIR=/tmp
# Second serial port: a clean channel for results (no kernel messages).
export VMTEST_RESULTS=/dev/ttyS1
stty -F /dev/ttyS1 raw -echo 2>/dev/null
for c in cpu memory pids io; do
  echo "+$c" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || echo "VMTEST_WARN: cannot enable $c"
done
echo "VMTEST_START kernel=$(uname -r) controllers=$(cat /sys/fs/cgroup/cgroup.subtree_control)"
cd /test
sh /test/run.sh
rc=$?
echo "VMTEST_EXIT=$rc"
echo "VMTEST_EXIT=$rc" > /dev/ttyS1 2>/dev/null
sync
poweroff -f
"""


def busybox_applets(busybox):
    rc, out, err = run([busybox, "--list"])
    if rc == 0 and out.strip():
        return out.split()
    # Cannot run it here (should not happen on x86_64): a minimal set.
    return ("sh ash cat echo mkdir rmdir mount umount ls sleep poweroff sync test [ "
            "grep sed awk head tail wc kill ps cp mv rm ln dd seq tr cut sort uname "
            "timeout env true false printf expr date").split()


def build_initramfs(info, script, bins, files, out_path, systemd=False):
    """busybox VM: the whole initramfs. systemd VM: only the test's files,
    appended to the cached root filesystem image (the kernel unpacks
    concatenated newc archives in order, later entries overwriting)."""
    c = Cpio()
    if not systemd:
        for d in ("bin", "sbin", "proc", "sys", "dev", "tmp", "etc", "mnt", "root", "test/bin"):
            c.dir(d)
        c.file("bin/busybox", open(info["busybox"], "rb").read())
        for a in busybox_applets(info["busybox"]):
            if a in ("busybox",) or "/" in a:
                continue
            c.symlink(f"bin/{a}", "busybox")
        c.file("init", INIT.encode())
    c.file("test/run.sh", open(script, "rb").read())
    for b in bins:
        c.file(f"test/bin/{os.path.basename(b)}", open(b, "rb").read())
    for src, dest in files:
        mode = os.stat(src).st_mode & 0o777
        c.file(dest, open(src, "rb").read(), mode)
    data = c.finish()
    with open(out_path, "wb") as f:
        if systemd:
            with open(info["systemd_image"], "rb") as base:
                shutil.copyfileobj(base, f, 1 << 20)
        f.write(data)
    return os.path.getsize(out_path)


# --- the systemd node: a Debian bookworm root filesystem -----------------
#
# debootstrap (minbase + the packages below) into the cache, customised for a
# test boot, packed once into a newc cpio that the kernel unpacks as its
# root filesystem (systemd is /init). A run appends a small second cpio with
# the test's files. Rebuilt only when SYSTEMD_PACKAGES (the debootstrap) or
# SYSTEMD_SETUP_VERSION / the setup files (the customisation) change.

SYSTEMD_SUITE = "bookworm"
SYSTEMD_PACKAGES = sorted([
    "systemd", "systemd-sysv", "dbus", "udev", "containerd", "runc", "systemd-oomd",
    "earlyoom", "procps",
])
SYSTEMD_SETUP_VERSION = "2"

# The unit that runs the test: /test/run.sh under bash-less sh, output on the
# console, results on ttyS1, then power off.
VMTEST_UNIT = """[Unit]
Description=qosd VM test
After=dbus.service containerd.service systemd-journald.service
Wants=dbus.service containerd.service

[Service]
Type=simple
ExecStart=/usr/local/sbin/vmtest-run
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
TTYReset=no
TTYVHangup=no
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
"""

VMTEST_RUN = """#!/bin/sh
export PATH=/test/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TMPDIR=/tmp
export VMTEST_RESULTS=/dev/ttyS1
stty -F /dev/ttyS1 raw -echo 2>/dev/null
# wait (bounded) for containerd's socket: the tests need the CRI
i=0; while [ ! -S /run/containerd/containerd.sock ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
echo "VMTEST_START kernel=$(uname -r) pid1=$(cat /proc/1/comm) cgroupfs=$(stat -fc %T /sys/fs/cgroup) uptime=$(cut -d' ' -f1 /proc/uptime) controllers=$(cat /sys/fs/cgroup/cgroup.subtree_control)"
cd /test
sh /test/run.sh
rc=$?
echo "VMTEST_EXIT=$rc"
echo "VMTEST_EXIT=$rc" > /dev/ttyS1 2>/dev/null
sync
systemctl poweroff -ff
"""

CONTAINERD_CONFIG = """version = 2
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "qosd.test/pause:1"
  disable_apparmor = true
  restrict_oom_score_adj = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
        # the root filesystem is the initramfs (rootfs), where pivot_root fails
        NoPivotRoot = true
"""


def systemd_image_key():
    import hashlib
    return hashlib.sha256(
        f"{SYSTEMD_SUITE}|minbase|{','.join(SYSTEMD_PACKAGES)}".encode()
    ).hexdigest()[:12]


def debian_mirror():
    for f in ["/etc/apt/sources.list"] + glob.glob("/etc/apt/sources.list.d/*"):
        try:
            text = open(f).read()
        except OSError:
            continue
        m = re.search(r"(?:URIs:|^deb)\s+(?:\[[^\]]*\]\s+)?(https?://\S*debian\.org/debian)/?\s", text, re.M)
        if m:
            return m.group(1)
    return "http://deb.debian.org/debian"


def _unmount_under(path):
    """Lazily unmount every mount at or below `path`, deepest first."""
    prefix = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo") as f:
            points = [l.split(" ")[4] for l in f]
    except OSError:
        return
    mine = [p for p in points if p == prefix or p.startswith(prefix + "/")]
    for p in sorted(mine, key=len, reverse=True):
        run(["umount", "-l", p])


def _debootstrap(rootfs):
    if os.path.exists(os.path.join(rootfs, ".debootstrap-done")):
        return
    if shutil.which("debootstrap") is None:
        raise Skip("debootstrap not found (apt-get install debootstrap)")
    tmp = rootfs + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    mirror = debian_mirror()
    cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(SYSTEMD_PACKAGES)}",
           SYSTEMD_SUITE, tmp, mirror]
    log(f"debootstrap (one-time, ~1 min): {' '.join(cmd)}")
    t0 = time.time()
    rc, out, err = run(cmd)
    _unmount_under(tmp)  # debootstrap can leave /proc mounted in the target
    if rc != 0:
        tail = (out + err).strip()[-800:]
        shutil.rmtree(tmp, ignore_errors=True)
        raise Skip(f"debootstrap failed (rc {rc}): {tail}")
    open(os.path.join(tmp, ".debootstrap-done"), "w").write(" ".join(cmd) + "\n")
    os.replace(tmp, rootfs)
    log(f"debootstrap done in {time.time() - t0:.1f}s")


def _write(root, rel, text, mode=0o644):
    path = os.path.join(root, rel.lstrip("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def _symlink(root, rel, target):
    path = os.path.join(root, rel.lstrip("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(target, path)


def _customise(root):
    """Idempotent: make the debootstrapped tree boot as a test node."""
    _symlink(root, "init", "/lib/systemd/systemd")
    _write(root, "etc/hostname", "qosd-vm\n")
    _write(root, "etc/fstab", "# rootfs is the initramfs\n")
    # containerd copies both into every sandbox; minbase has neither.
    _write(root, "etc/hosts", "127.0.0.1 localhost\n::1 localhost\n")
    _write(root, "etc/resolv.conf", "# no network in the test VM\n")
    _write(root, "etc/machine-id", "")
    # Nothing to log in on, no network to wait for, no timers to run.
    for unit in ("getty@tty1.service", "serial-getty@ttyS0.service", "console-getty.service",
                 "systemd-networkd-wait-online.service", "apt-daily.timer", "apt-daily-upgrade.timer",
                 "e2scrub_all.timer", "e2scrub_reap.service", "fstrim.timer", "dpkg-db-backup.timer",
                 "systemd-timesyncd.service", "systemd-logind.service", "getty.target",
                 "systemd-update-utmp.service", "systemd-update-utmp-runlevel.service",
                 "proc-sys-fs-binfmt_misc.automount"):
        _symlink(root, f"etc/systemd/system/{unit}", "/dev/null")
    # systemd-oomd and earlyoom are installed for the benchmark, started by it.
    for unit in ("systemd-oomd.service", "systemd-oomd.socket", "earlyoom.service"):
        for wants in glob.glob(os.path.join(root, "etc/systemd/system/*.wants", unit)):
            os.unlink(wants)
    _write(root, "etc/systemd/journald.conf.d/vmtest.conf",
           "[Journal]\nStorage=volatile\nForwardToConsole=no\n")
    _write(root, "etc/containerd/config.toml", CONTAINERD_CONFIG)
    _write(root, "etc/systemd/system/vmtest.service", VMTEST_UNIT)
    _symlink(root, "etc/systemd/system/multi-user.target.wants/vmtest.service",
             "/etc/systemd/system/vmtest.service")
    _write(root, "usr/local/sbin/vmtest-run", VMTEST_RUN, 0o755)
    os.makedirs(os.path.join(root, "test", "bin"), exist_ok=True)
    # Docs, manuals, locales and apt's caches are dead weight in RAM.
    for rel in ("usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info",
                "var/cache/apt", "var/lib/apt/lists"):
        p = os.path.join(root, rel)
        if os.path.isdir(p):
            shutil.rmtree(p)
            os.makedirs(p)


def _setup_key():
    import hashlib
    h = hashlib.sha256()
    for part in (SYSTEMD_SETUP_VERSION, inspect.getsource(_customise), VMTEST_UNIT, VMTEST_RUN, CONTAINERD_CONFIG):
        h.update(part.encode())
    return h.hexdigest()[:8]


def _pack_dir(root, out_path):
    """newc cpio of a directory tree with the host's cpio (hard links, device
    nodes and modes kept), padded to 512 bytes."""
    if shutil.which("cpio") is None:
        raise Skip("cpio not found (apt-get install cpio)")
    tmp = out_path + ".tmp"
    with open(tmp, "wb") as f:
        p = subprocess.run(
            "find . -xdev -not -name .debootstrap-done | LC_ALL=C sort | cpio -o -H newc --quiet",
            shell=True, cwd=root, stdout=f, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise HarnessError(f"cpio of {root}: {p.stderr.decode()[-400:]}")
    os.replace(tmp, out_path)


def prepare_systemd():
    """The kernel (prepare()) plus the systemd root filesystem cpio; cached."""
    import fcntl
    info = prepare()
    cache = cache_dir()
    with open(os.path.join(cache, ".lock-systemd"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        base = os.path.join(cache, f"systemd-{systemd_image_key()}")
        os.makedirs(base, exist_ok=True)
        rootfs = os.path.join(base, "rootfs")
        image = os.path.join(base, f"rootfs-{_setup_key()}.cpio")
        if not os.path.exists(image):
            t0 = time.time()
            _debootstrap(rootfs)
            _customise(rootfs)
            for old in glob.glob(os.path.join(base, "rootfs-*.cpio")):
                os.unlink(old)
            _pack_dir(rootfs, image)
            log(f"systemd image {os.path.getsize(image) >> 20} MiB in {time.time() - t0:.1f}s: {image}")
        # stale images of other package lists
        for other in glob.glob(os.path.join(cache, "systemd-*")):
            if os.path.isdir(other) and other != base:
                log(f"removing stale systemd image {other}")
                shutil.rmtree(other, ignore_errors=True)
    info = dict(info)
    info["systemd_rootfs"] = rootfs
    info["systemd_image"] = image
    info["systemd_packages"] = SYSTEMD_PACKAGES
    return info


def choose_accel(requested=None):
    req = requested or os.environ.get("QOSD_VM_ACCEL")
    if req:
        return req
    # /dev/kvm served by kvm_pvm cannot run a stock kernel (it hangs): TCG.
    if os.path.exists("/sys/module/kvm_pvm"):
        return "tcg"
    if os.path.exists("/dev/kvm") and (
        os.path.exists("/sys/module/kvm_intel") or os.path.exists("/sys/module/kvm_amd")
    ) and os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "kvm"
    return "tcg"


def numa_args(nodes, mem_mib):
    """qemu arguments for `--numa` options: each `memdev=mN` named by a node
    gets a RAM backend, the VM's memory split evenly between them (qemu 7
    wants every node's memory given when there are NUMA nodes)."""
    out = []
    memdevs = [m.group(1) for n in nodes for m in [re.search(r"memdev=([\w-]+)", n)] if m]
    for i, name in enumerate(memdevs):
        share = mem_mib // len(memdevs) + (mem_mib % len(memdevs) if i == 0 else 0)
        out += ["-object", f"memory-backend-ram,id={name},size={share}M"]
    for n in nodes:
        out += ["-numa", n]
    return out


def run_vm(args):
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        raise Skip("qemu-system-x86_64 not found (apt-get install --no-install-recommends qemu-system-x86)")
    info = prepare_systemd() if args.systemd else prepare()
    cache = cache_dir()
    work = os.path.join(cache, "runs")
    os.makedirs(work, exist_ok=True)
    initrd = os.path.join(work, f"initrd-{os.getpid()}.cpio")
    files = []
    for spec in args.file or []:
        src, _, dest = spec.partition(":")
        if not dest:
            raise HarnessError(f"--file wants SRC:DEST, got {spec!r}")
        files.append((src, dest))
    t0 = time.time()
    size = build_initramfs(info, args.script, args.bin or [], files, initrd, systemd=args.systemd)
    t_initrd = time.time() - t0
    accel = choose_accel(args.accel)
    append = "console=ttyS0 quiet loglevel=3 panic=-1 psi=1 mitigations=off"
    if args.systemd:
        # systemd as PID 1 from the initramfs root: cgroup v2 only, or with
        # --cgroup v1 the legacy hierarchies (systemd 252 still boots them).
        unified = 0 if args.cgroup == "v1" else 1
        append += (f" rdinit=/init systemd.unified_cgroup_hierarchy={unified}"
                   " systemd.show_status=error systemd.log_level=warning")
    if args.append:
        append += " " + args.append
    cmd = [
        qemu, "-accel", accel, "-m", str(args.mem), "-smp", str(args.smp),
        "-nographic", "-no-reboot", "-nic", "none",
        "-kernel", info["vmlinux"], "-initrd", initrd, "-append", append,
    ]
    results = args.results or os.path.join(work, f"results-{os.getpid()}.txt")
    cmd += ["-serial", "mon:stdio", "-serial", f"file:{results}"]
    cmd += numa_args(args.numa or [], args.mem)
    if args.cpu:
        cmd[1:1] = ["-cpu", args.cpu]
    elif accel == "kvm":
        cmd[1:1] = ["-cpu", "host"]
    log(f"initrd {size // 1024} KiB built in {t_initrd:.2f}s; booting ({accel}): {' '.join(cmd)}")
    logf = open(args.log, "w") if args.log else None
    t1 = time.time()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    rc = None
    timed_out = False
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    buf = b""
    deadline = t1 + args.timeout
    try:
        while True:
            left = deadline - time.time()
            if left <= 0:
                timed_out = True
                break
            if not sel.select(timeout=min(left, 1.0)):
                if p.poll() is not None:
                    break
                continue
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            text = chunk.decode("utf-8", "replace").replace("\r\n", "\n")
            sys.stdout.write(text)
            sys.stdout.flush()
            if logf:
                logf.write(text)
                logf.flush()
    finally:
        if p.poll() is None:
            try:
                p.wait(timeout=10 if not timed_out else 0.1)
            except subprocess.TimeoutExpired:
                p.kill()  # our own qemu, by its handle (pid)
                p.wait()
        if logf:
            logf.close()
        try:
            os.unlink(initrd)
        except OSError:
            pass
    elapsed = time.time() - t1
    out = buf.decode("utf-8", "replace")
    m = re.findall(r"VMTEST_EXIT=(\d+)", out)
    if m:
        rc = int(m[-1])
    log(f"qemu finished in {elapsed:.2f}s (boot+test+poweroff), test rc={rc}, timed_out={timed_out}")
    if not args.results:
        # Not kept: echo the results channel so CLI users see it.
        try:
            res = open(results, "rb").read().decode("utf-8", "replace")
            os.unlink(results)
            if res.strip():
                print("--- results (ttyS1) ---")
                print(res.replace("\r\n", "\n"), end="")
        except OSError:
            pass
    print(f"VMHARNESS_ELAPSED={elapsed:.2f}", flush=True)
    if timed_out:
        print(f"VMHARNESS_ERROR: timeout after {args.timeout}s", file=sys.stderr)
        return EXIT_TIMEOUT
    if rc is None:
        print(f"VMHARNESS_ERROR: no VMTEST_EXIT line (qemu rc {p.returncode})", file=sys.stderr)
        return EXIT_HARNESS
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("prepare")
    sub.add_parser("prepare-systemd")
    r = sub.add_parser("run")
    r.add_argument("--script", required=True)
    r.add_argument("--bin", action="append")
    r.add_argument("--file", action="append", help="SRC:DEST (DEST inside the VM, e.g. test/plan.json)")
    r.add_argument("--timeout", type=float, default=180)
    r.add_argument("--mem", type=int, default=None, help="MiB (default 1024; 2048 with --systemd)")
    r.add_argument("--systemd", action="store_true",
                   help="boot the Debian systemd node (systemd PID 1, dbus, containerd) instead of busybox")
    r.add_argument("--smp", default="2",
                   help="qemu -smp: a CPU count, or a topology such as 8,sockets=2,cores=2,threads=2")
    r.add_argument("--cpu", help="qemu -cpu model (default: qemu's; `-cpu host` under KVM)")
    r.add_argument("--numa", action="append",
                   help="qemu -numa option (repeatable), e.g. node,nodeid=0,cpus=0-3,memdev=m0; "
                        "a memdev=mN gets its RAM backend (the VM's memory split evenly)")
    r.add_argument("--cgroup", choices=["v1", "v2"], default="v2",
                   help="with --systemd: the cgroup hierarchy systemd mounts (default v2)")
    r.add_argument("--append", default="")
    r.add_argument("--log")
    r.add_argument("--results", help="file receiving what the script writes to $VMTEST_RESULTS (/dev/ttyS1)")
    r.add_argument("--accel")
    args = ap.parse_args()
    if args.cmd == "run" and args.mem is None:
        args.mem = 2048 if args.systemd else 1024
    try:
        if args.cmd == "prepare":
            info = prepare()
            print(json.dumps(info, indent=2))
            return 0
        if args.cmd == "prepare-systemd":
            info = prepare_systemd()
            print(json.dumps(info, indent=2))
            return 0
        return run_vm(args)
    except Skip as e:
        print(f"VMHARNESS_SKIP: {e}", file=sys.stderr)
        return EXIT_SKIP
    except HarnessError as e:
        print(f"VMHARNESS_ERROR: {e}", file=sys.stderr)
        return EXIT_HARNESS


if __name__ == "__main__":
    sys.exit(main())
