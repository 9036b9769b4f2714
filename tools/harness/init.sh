#!/bin/busybox sh
# tools/harness/init.sh - /init of the vmtest harness VM (busybox sh).
#
# Kernel command line parameters (set by tools/vmtest):
#   vmtest.dir=DIR    host temp dir, visible through the shared root; holds
#                     run.sh (what to run), and receives status
#   vmtest.mode=run|shell
#   vmtest.modroot=DIR  holds lib/modules/<kver> of the harness kernel
#   vmtest.beat=SECS  write the uptime to DIR/heartbeat (and the console) every SECS s while the
#                     command runs, so tools/vmtest can tell a harness
#                     that stopped making progress (0: no heartbeat)
# Loads the modules from /etc/modules and /etc/modules.kvm, mounts the host's root (virtiofs tag
# "hostroot") with fresh /proc, /sys, /dev, chroots into it and runs
# DIR/run.sh with bash. In run mode stdout/stderr go to the virtio serial
# ports named kiln.stdout/kiln.stderr, stdin is /dev/null; in shell mode
# everything is on /dev/hvc0. The exit status is written to DIR/status,
# then the VM powers off. Diagnostics go to the kernel console (the log).

/bin/busybox --install -s /bin
export PATH=/bin HOME=/
R=/newroot
modopts= kvm_pid= beat_pid=

log() { echo "vmtest-init: $*" >/dev/kmsg; }

fail() {
	log "FAILED: $*"
	sync
	poweroff -f
}

arg() {
	local a
	for a in $(cat /proc/cmdline); do
		case "$a" in "vmtest.$1="*) echo "${a#*=}"; return ;; esac
	done
}

# Insert the modules listed in $1, in order.
load_modules() {
	local kver m
	kver=$(uname -r)
	while read -r m; do
		insmod "/lib/modules/$kver/$m" || { log "insmod $m failed"; return 1; }
	done <"$1"
}

# No transparent huge pages in the harness kernel. With them ("always",
# Debian's default) khugepaged collapses the nested guests' memory under
# them: a bench-fs run wedged the whole harness with khugepaged blocked
# in the kernel log, and a loop of four-vCPU boots with them on stalled
# at its fifth boot. See Documentation/harness.md.
no_thp() {
	local f=/sys/kernel/mm/transparent_hugepage/enabled
	[ -w $f ] || return 0
	echo never >$f || log "could not turn off transparent huge pages"
}

setup_base() {
	mount -t proc proc /proc
	mount -t sysfs sysfs /sys
	mount -t devtmpfs devtmpfs /dev
	no_thp
	load_modules /etc/modules || fail "loading /etc/modules"
	# KVM takes a while to insert under TCG: overlap it with the mounts.
	load_modules /etc/modules.kvm &
	kvm_pid=$!
}

setup_root() {
	mount -t virtiofs hostroot $R || fail "mount virtiofs hostroot"
	mount -t proc proc $R/proc || fail "mount $R/proc"
	mount -t sysfs sysfs $R/sys || fail "mount $R/sys"
	mount -t devtmpfs devtmpfs $R/dev || fail "mount $R/dev"
	mkdir -p $R/dev/pts $R/dev/shm
	mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts $R/dev/pts ||
		fail "mount $R/dev/pts"
	mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm || fail "mount $R/dev/shm"
	# The harness kernel's modules, so modprobe works inside: bind them
	# over /lib/modules if the host has one, else point modprobe at them.
	local mr kver
	mr=$(arg modroot)
	kver=$(uname -r)
	[ -n "$mr" ] && [ -d "$R$mr/lib/modules/$kver" ] || return 0
	if [ -d $R/lib/modules ]; then
		mount -t tmpfs tmpfs $R/lib/modules &&
			mkdir $R/lib/modules/$kver &&
			mount --bind "$R$mr/lib/modules/$kver" $R/lib/modules/$kver &&
			return 0
		log "could not mount the harness modules at /lib/modules/$kver"
	fi
	modopts="-d $mr"
}

# Print the /dev node of the virtio serial port named $1.
port() {
	local p
	for p in /sys/class/virtio-ports/*; do
		[ "$(cat "$p/name" 2>/dev/null)" = "$1" ] &&
			echo "/dev/${p##*/}" && return
	done
	fail "no virtio serial port named $1"
}

# Every $2 seconds, in the background, write the uptime to $1/heartbeat
# on the shared root, and as "vmtest-beat UPTIME" to the console. The
# file stops changing when this harness kernel stops scheduling or the
# shared root stops answering: what tools/vmtest's watchdog looks for;
# the console's beats tell which of the two it was.
start_heartbeat() {
	local f=$R$1/heartbeat secs=$2
	[ -n "$secs" ] && [ "$secs" != 0 ] || return 0
	# This boot's function addresses (KASLR, modules), for tools/vmtest
	# to name where a stalled harness's CPUs are: 2 MB, under a second.
	grep ' [tT] ' /proc/kallsyms >"$R$1/ksyms" &
	(while cut -d' ' -f1 /proc/uptime >"$f"; do sleep "$secs"; done) &
	beat_pid=$!
	(while echo "vmtest-beat $(cut -d' ' -f1 /proc/uptime)" >/dev/ttyS0; do
		sleep "$secs"
	done) &
	beat_pid="$beat_pid $!"
}

run() {
	local dir=$1 mode=$2 rc
	[ -f "$R$dir/run.sh" ] || fail "no $dir/run.sh on the shared root"
	cut -d' ' -f1 /proc/uptime >"$R$dir/boot-time"
	set -- chroot $R /usr/bin/env -i ${modopts:+"MODPROBE_OPTIONS=$modopts"} \
		/bin/bash --norc --noprofile "$dir/run.sh"
	if [ "$mode" = shell ]; then
		setsid -c "$@" <>/dev/hvc0 >&0 2>&0
	else
		"$@" </dev/null >"$(port kiln.stdout)" 2>"$(port kiln.stderr)"
	fi
	rc=$?
	[ -z "$beat_pid" ] || kill $beat_pid
	echo "$rc" >"$R$dir/status.tmp" && mv "$R$dir/status.tmp" "$R$dir/status"
	log "command exited with status $rc"
}

main() {
	local dir mode
	setup_base
	dir=$(arg dir)
	mode=$(arg mode)
	[ -n "$dir" ] || fail "no vmtest.dir= on the kernel command line"
	setup_root
	wait $kvm_pid || fail "loading /etc/modules.kvm"
	# One idle VM for the harness's life: see tools/harness/kvm-hold.c.
	# Where it cannot run, the tests still do; say so in the log.
	kvm-hold 2>/dev/kmsg &
	log "harness ready"
	start_heartbeat "$dir" "$(arg beat)"
	run "$dir" "${mode:-run}"
	sync
	poweroff -f
}

main
