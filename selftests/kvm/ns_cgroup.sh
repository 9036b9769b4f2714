#!/bin/bash
# selftests/kvm/ns_cgroup.sh O - the namespace launcher's cgroup limits
# and freezer on a cgroup v2 root that offers the memory, cpu and pids
# controllers: selftests/unit/isolate_ns.c's cgroup cases, run where
# run_kvm.sh runs (the harness VM, whose kernel binds no controller to
# cgroup v1), as this development host's v2 root offers none of them and
# the host suite skips them here. Needs no KVM itself: the harness is
# where such a kernel is. Mounts cgroup2 on /sys/fs/cgroup where no
# cgroup2 hierarchy is mounted (the harness's init mounts none), and
# loads the loop and overlay modules the sandbox's root needs.
set -u

O=${1:-build}
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
suite=$O/selftests/isolate_ns
if [ ! -x "$suite" ]; then
	echo "TAP version 13"
	echo "1..1"
	echo "not ok 1 - ns_cgroup: no $suite (make selftests builds it)"
	exit 1
fi
# A chrooted process may not make a user namespace (clone(2): EPERM),
# and the harness runs its command chrooted into /newroot (harness.md):
# where that refuses, the suite runs in a mount namespace of its own
# where /newroot is moved onto the namespace's root, as switch_root
# would have left it (the chroot left first: it keeps the working
# directory outside a chroot of its own, walks up, and chroots there;
# then switch_root's steps: cd /newroot, mount --move . /, chroot .).
if [ -n "${KILN_IN_HARNESS:-}" ] && [ -z "${KILN_NS_UNCHROOTED:-}" ] &&
	! unshare --user true 2>/dev/null &&
	[ -d /dev/shm ]; then
	exec unshare --mount --propagation private \
		env KILN_NS_UNCHROOTED=1 python3 -c '
import ctypes, os, sys
MS_MOVE = 8192
libc = ctypes.CDLL(None, use_errno=True)
cwd = os.getcwd()
os.makedirs("/dev/shm/kiln-unchroot", exist_ok=True)
os.chroot("/dev/shm/kiln-unchroot")
for _ in range(64):
	os.chdir("..")
os.chroot(".")
os.chdir("/newroot")
if libc.mount(b"/newroot", b"/", None, MS_MOVE, None):
	sys.exit("ns_cgroup: mount --move /newroot /: " +
		 os.strerror(ctypes.get_errno()))
os.chroot(".")
os.chdir(cwd)
os.execv(sys.argv[1], sys.argv[1:])
' "$PWD/selftests/kvm/ns_cgroup.sh" "$O"
fi
if [ "$(id -u)" -eq 0 ]; then
	for m in loop overlay; do
		modprobe -q "$m" 2>/dev/null || true
	done
	if ! grep -q ' - cgroup2 ' /proc/self/mountinfo; then
		mount -t cgroup2 none /sys/fs/cgroup ||
			echo "# ns_cgroup: cannot mount cgroup2 on /sys/fs/cgroup"
	fi
fi
# The harness's /tmp is the host's over virtio-fs: the test's image,
# sockets and run directories go to the harness VM's own tmpfs.
export TMPDIR=${KILN_TEST_TMP:-${TMPDIR:-/tmp}}
exec "$suite" -t ns.cgroup_limits -t ns.pause_resume_and_no_snapshot
