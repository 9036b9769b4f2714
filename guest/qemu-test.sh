#!/bin/bash
# guest/qemu-test.sh [O] - boot the guest under QEMU microvm and check init.
#
# Needs no /dev/kvm: QEMU's TCG emulates the CPU, and isa-debug-exit sits on
# Kiln's exit port (0x501), so the guest's status comes back as QEMU's exit
# code, (status << 1) | 1. TAP output; exit 0 only if every case passes.
set -uo pipefail

O=${1:-build}
G=$O/guest
kernel=${KERNEL:-$G/bzImage}
initrd=$G/initramfs.cpio
accel=${ACCEL:-tcg}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# microvm has no keyboard controller: without -device i8042 the reboot=k
# reset of a panic falls through to a BIOS restart that QEMU never sees.
# run INITRD SMP APPEND... - boots once; output in $tmp/out, returns QEMU's rc
run() {
	local rd=$1 smp=$2
	shift 2
	timeout 120 qemu-system-x86_64 \
		-M microvm,x-option-roms=off,isa-serial=on,rtc=off,pit=on,pic=on \
		-accel "$accel" -cpu max -m 256 -smp "$smp" \
		-nographic -no-reboot -nodefaults -serial stdio \
		-kernel "$kernel" -initrd "$rd" \
		-append "console=ttyS0 reboot=k panic=-1 quiet $*" \
		-device isa-debug-exit,iobase=0x501,iosize=4 -device i8042 \
		</dev/null >"$tmp/out" 2>&1
}

n=0
fails=0
# check NAME WANT_RC GREP INITRD SMP APPEND...
check() {
	local name=$1 want=$2 pattern=$3 rc
	shift 3
	n=$((n + 1))
	run "$@"
	rc=$?
	if [ "$rc" -eq "$want" ] && grep -q -- "$pattern" "$tmp/out"; then
		echo "ok $n $name"
	else
		echo "not ok $n $name (rc $rc, want $want)"
		sed 's/^/# /' "$tmp/out"
		fails=$((fails + 1))
	fi
}

# The kernel command line knows only double quotes; "..." is one argument.

# A second archive carrying /kiln/argv, appended as the monitor does.
mkdir -p "$tmp/extra/kiln"
printf '%s\0' sh -c 'echo "argv:$0:$1"; exit 3' zero 'a b' >"$tmp/extra/kiln/argv"
(cd "$tmp/extra" && printf 'kiln\nkiln/argv\n' |
	cpio --quiet -o -H newc --owner=0:0) >"$tmp/extra.cpio"
cat "$initrd" "$tmp/extra.cpio" >"$tmp/combined.cpio"

echo "TAP version 13"
echo "1..9"
start=$(date +%s.%N)
check "uname -a" 1 "Linux sandbox" "$initrd" 2 -- uname -a
echo "# boot to uname: $(echo "$(date +%s.%N) - $start" | bc) s ($accel)"
check "exit 7" 15 "" "$initrd" 2 -- sh -c '"exit 7"'
check "nproc is 2" 1 "^2" "$initrd" 2 -- nproc
check "missing command is 127" 255 "kiln-init: cannot execute" \
	"$initrd" 1 -- /no/such/command
check "killed by SIGKILL is 137" 19 "" "$initrd" 1 -- sh -c '"kill -9 $$"'
check "/kiln/argv" 7 "argv:zero:a b" "$tmp/combined.cpio" 1 -- uname
check "env and mounts" 1 "TERM=vt100 HOME=/root sandbox tmpfs" "$initrd" 1 \
	kiln.term=vt100 -- sh -c '"echo TERM=$TERM HOME=$HOME $(hostname) $(stat -f -c %T /run)"'
check "kiln.console=raw" 1 "^-echo -icrnl -opost" "$initrd" 1 kiln.console=raw \
	-- sh -c '"stty -a | grep -o -e -echo -e -opost -e -icrnl | sort -u | xargs"'
# panic=-1 reboots at once and -no-reboot turns that into QEMU exiting 0.
check "sysrq crash ends the VM" 0 "sysrq" "$initrd" 1 \
	-- sh -c '"echo c > /proc/sysrq-trigger"'
exit $((fails > 0))
