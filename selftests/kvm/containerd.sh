#!/bin/bash
# selftests/kvm/containerd.sh O - containerd runs Kiln VMs through
# containerd-shim-kiln-v2 (Documentation/containerd.md).
#
# Starts Debian's containerd with a root, state and sockets of its own,
# imports an OCI image this script writes (a layout with one layer: the
# static busybox of busybox-static), and drives it with ctr: `ctr run
# --runtime io.containerd.kiln.v2` with the command's exit status, `ctr
# task exec` without and with a terminal and with stdin, ps and
# metrics, `ctr task kill` with signals (the init and an exec), the
# io.kiln.net.policy annotation denying and granting a flow to an
# upstream on this test's own loopback, the VM in the pod's network
# namespace (ctr run --with-ns network:PATH) reaching an upstream only
# there, an unknown io.kiln.* annotation refused, the shim killed by
# SIGKILL (its VM must go too, and containerd's delete clean up), a pod
# (two containers with one sandbox id: one VM, sized by the CRI's
# sandbox sizing annotations), and ten containers at once, each in its
# own VM with its own root.
#
# Needs root, KVM (run_kvm.sh runs it in the harness), containerd and ctr
# (tools/install-deps), the guest (make guest), O/vmm and
# O/containerd-shim-kiln-v2 (make all). Everything runs in a mount and
# network namespace of its own: a tmpfs on /run holds containerd's state,
# the shims' sockets and the VMs' state (the harness's /run is the host's,
# over virtio-fs), the upstream listens on 192.0.2.10 (TEST-NET-1) on
# that namespace's loopback, where the VMs' proxies connect, and the pod's
# upstream on 198.51.100.10 (TEST-NET-2) in a namespace made beneath it
# (ip netns add kiln-pod, on that /run).
set -u

O=${1:-build}
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
O=$(cd "$O" && pwd) || exit 1
TESTS=23

fail_all() {
	echo "TAP version 13"
	echo "1..1"
	echo "not ok 1 - containerd: $*"
	exit 1
}

if [ -z "${KILN_CONTAINERD_INNER:-}" ]; then
	[ "$(id -u)" -eq 0 ] || fail_all "needs root (containerd, mounts)"
	for b in containerd ctr script busybox ip; do
		command -v "$b" >/dev/null ||
			fail_all "no $b (tools/install-deps installs containerd)"
	done
	for f in "$O/vmm" "$O/containerd-shim-kiln-v2"; do
		[ -x "$f" ] || fail_all "no $f (make all)"
	done
	# containerd's overlayfs snapshotter: a harness VM loads nothing
	# by itself (best effort: a kernel may have it built in).
	modprobe -q overlay 2>/dev/null || true
	exec unshare --mount --propagation private --net \
		env KILN_CONTAINERD_INNER=1 bash "$0" "$O"
fi

n=0 failed=0
ok() {
	n=$((n + 1))
	echo "ok $n - $*"
}
not_ok() {
	n=$((n + 1))
	failed=$((failed + 1))
	echo "not ok $n - $*"
}
check() { # check NAME CMD...: ok when CMD succeeds
	local name=$1
	shift
	if "$@"; then ok "$name"; else not_ok "$name"; fi
}
comment() { sed 's/^/# /'; }
vms() { pgrep -f -- '--control-socket /run/kiln-containerd/'; }
no_vm_within() { # no_vm_within S: no VM of this test left within S seconds
	local i
	for ((i = 0; i < $1 * 10; i++)); do
		[ -z "$(vms)" ] && return 0
		sleep 0.1
	done
	return 1
}

mount -t tmpfs -o mode=0755 tmpfs /run || fail_all "tmpfs on /run"
ip link set lo up && ip addr add 192.0.2.10/32 dev lo ||
	fail_all "the upstream's address on lo"
T=/run/kiln-containerd-test
# KILN_CONTAINERD_LOG=FILE: containerd's whole log (the shims' included,
# at debug level) copied there at the end

mkdir -p "$T/www" "$T/root" "$T/state"
SOCK=$T/containerd.sock
RT=io.containerd.kiln.v2
IMG=kiln.test/busybox:1
# (No process substitution anywhere: the harness VM has no /dev/fd.)
# Each ctr call is bounded: a hang fails a test, not the run.
ctr_() { timeout 180 ctr -a "$SOCK" -n kiln "$@"; }

pids_to_stop=()
cleanup() {
	local p
	for p in "${pids_to_stop[@]}"; do
		kill "$p" 2>/dev/null
	done
	# any VM left: its vmm (state under /run/kiln-containerd)
	pkill -KILL -f -- "--control-socket /run/kiln-containerd/" 2>/dev/null
	wait 2>/dev/null
	[ -z "${KILN_CONTAINERD_LOG:-}" ] || cp "$T/containerd.log" "$KILN_CONTAINERD_LOG"
}
trap cleanup EXIT

# --- the image: an OCI layout with busybox as its one layer ---
rootfs=$T/img-root
mkdir -p "$rootfs/bin" "$rootfs/etc" "$rootfs/tmp" "$rootfs/proc" \
	"$rootfs/sys" "$rootfs/dev" "$rootfs/run" "$rootfs/root"
cp "$(command -v busybox)" "$rootfs/bin/busybox"
for a in $(busybox --list); do
	[ "$a" = busybox ] || ln -sf busybox "$rootfs/bin/$a"
done
echo "root:x:0:0:root:/root:/bin/sh" >"$rootfs/etc/passwd"
echo "root:x:0:" >"$rootfs/etc/group"
chmod 1777 "$rootfs/tmp"
lay=$T/layout
mkdir -p "$lay/blobs/sha256"
blob() { # blob FILE: moved into the layout; prints "DIGEST SIZE"
	local d s
	d=$(sha256sum "$1" | cut -d' ' -f1)
	s=$(stat -c %s "$1")
	mv "$1" "$lay/blobs/sha256/$d"
	echo "$d $s"
}
tar --numeric-owner --owner=0 --group=0 -C "$rootfs" -cf "$T/layer.tar" . ||
	fail_all "tar of the layer"
read -r ld ls <<<"$(blob "$T/layer.tar")"
cat >"$T/config.json" <<EOF
{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],"Cmd":["sh"]},
 "rootfs":{"type":"layers","diff_ids":["sha256:$ld"]}}
EOF
read -r cd cs <<<"$(blob "$T/config.json")"
cat >"$T/manifest.json" <<EOF
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
 "config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$cd","size":$cs},
 "layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:$ld","size":$ls}]}
EOF
read -r md ms <<<"$(blob "$T/manifest.json")"
cat >"$lay/index.json" <<EOF
{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json",
 "digest":"sha256:$md","size":$ms,"platform":{"architecture":"amd64","os":"linux"},
 "annotations":{"io.containerd.image.name":"$IMG","org.opencontainers.image.ref.name":"1"}}]}
EOF
echo '{"imageLayoutVersion":"1.0.0"}' >"$lay/oci-layout"
tar -C "$lay" -cf "$T/image.tar" . || fail_all "tar of the layout"

# --- containerd, all its own ---
loglevel=info
[ -z "${KILN_CONTAINERD_LOG:-}" ] || loglevel=debug
cat >"$T/config.toml" <<EOF
version = 2
root = "$T/root"
state = "$T/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.internal.v1.opt",
  "io.containerd.tracing.processor.v1.otlp"]
[debug]
  level = "$loglevel"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
# Documentation/containerd.md's snippet: the CRI plugin must load it
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kiln]
  runtime_type = "io.containerd.kiln.v2"
  pod_annotations = ["io.kiln.*"]
EOF
PATH=$O:$PATH containerd --config "$T/config.toml" >"$T/containerd.log" 2>&1 &
pids_to_stop+=($!)
for _ in $(seq 100); do
	ctr_ version >/dev/null 2>&1 && break
	sleep 0.2
done
if ! ctr_ version >/dev/null 2>&1; then
	comment <"$T/containerd.log"
	fail_all "containerd did not answer on $SOCK"
fi

# KILN_CONTAINERD_BENCH=N (tools/bench-containerd): no tests, the
# benchmark: for Kiln's shim and for containerd-shim-runc-v2 (the lower
# bound), N times each, `ctr run --rm` to the command's first output line
# and to ctr's exit, then N `ctr task exec` round trips of `true` on a
# running container. Figures only (milliseconds: median, min, max).
now_ms() { echo $(($(date +%s%N) / 1000000)); }
stats() { # stats NAME VALUES...: "NAME: median M ms (min A, max B, n N)"
	local name=$1
	shift
	printf '%s\n' "$@" | sort -n | awk -v name="$name" '
		NF { v[++k] = $1 } END {
			if (k == 0) { print "# " name ": no samples"; exit }
			m = (k % 2) ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
			printf "# %s: median %d ms (min %d, max %d, n %d)\n", name, m, v[1], v[k], k }'
}
bench() { # bench RUNTIME LABEL
	local rt=$1 label=$2 i t0 t1 t2 line first=() total=() execs=()
	ctr_ images import "$T/image.tar" >/dev/null 2>&1
	for i in $(seq "$KILN_CONTAINERD_BENCH"); do
		t0=$(now_ms)
		# (no process substitution: the harness VM has no /dev/fd)
		t1=$(ctr_ run --rm --runtime "$rt" $IMG "b-$label-$i" sh -c 'echo first' 2>&1 |
			{
				t=
				while IFS= read -r line; do
					[ -z "$t" ] && [ "$line" = first ] && t=$(now_ms)
				done
				echo "$t"
			})
		t2=$(now_ms)
		[ -n "$t1" ] && first+=($((t1 - t0)))
		total+=($((t2 - t0)))
	done
	ctr_ run -d --runtime "$rt" $IMG "b-$label-x" sleep 600 >/dev/null 2>&1
	for i in $(seq "$KILN_CONTAINERD_BENCH"); do
		t0=$(now_ms)
		ctr_ task exec --exec-id "e$i" "b-$label-x" true >/dev/null 2>&1 &&
			execs+=($(($(now_ms) - t0)))
	done
	ctr_ task kill -s SIGKILL "b-$label-x" >/dev/null 2>&1
	sleep 1
	ctr_ task rm -f "b-$label-x" >/dev/null 2>&1
	ctr_ c rm "b-$label-x" >/dev/null 2>&1
	stats "$label ctr run to first output" "${first[@]}"
	stats "$label ctr run to exit" "${total[@]}"
	stats "$label ctr task exec true" "${execs[@]}"
}
if [ -n "${KILN_CONTAINERD_BENCH:-}" ]; then
	# runc's shim needs the cgroup v2 hierarchy (a harness has none mounted)
	grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts ||
		mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
	bench io.containerd.runc.v2 runc
	bench $RT kiln
	exit 0
fi

echo "TAP version 13"
echo "1..$TESTS"

# 0. the CRI plugin takes the documented runtime handler
out=$(ctr_ plugins ls 2>&1 | grep -E 'grpc.v1 +cri ')
echo "$out" | comment
check "the CRI plugin loads with the kiln runtime handler" \
	test -n "$(echo "$out" | grep ' ok')" -a \
	-n "$(grep -o 'Runtimes:map\[kiln:{Type:io.containerd.kiln.v2' "$T/containerd.log")"

# 1. import
out=$(ctr_ images import "$T/image.tar" 2>&1)
echo "$out" | comment
check "ctr images import of a locally written OCI layout" \
	grep -qx "$IMG" <<<"$(ctr_ images ls -q)"

# 2. run: output and exit status
out=$(ctr_ run --rm --runtime $RT $IMG t-run sh -c 'echo hello from kiln; exit 7' 2>&1)
rc=$?
echo "$out" | comment
check "ctr run: the command's output and exit status (7, got $rc)" \
	test "$rc" -eq 7 -a "$(echo "$out" | head -1)" = "hello from kiln"

# 3. the container's own root: the image's files, its hostname
out=$(ctr_ run --rm --runtime $RT $IMG t-root sh -c 'ls /bin/busybox && cat /etc/passwd && hostname' 2>&1)
rc=$?
echo "$out" | comment
check "ctr run: the image is the container's root" \
	test "$rc" -eq 0 -a "$(echo "$out" | sed -n 2p)" = "root:x:0:0:root:/root:/bin/sh"

# 4-9 on a long-running container
ctr_ run -d --runtime $RT $IMG t-pod sleep 600 2>&1 | comment
out=$(ctr_ task exec --exec-id e1 t-pod sh -c 'echo exec-out; echo exec-err >&2; exit 3' 2>"$T/err")
rc=$?
comment <"$T/err"
check "ctr task exec: stdout, stderr and exit status (3, got $rc)" \
	test "$rc" -eq 3 -a "$out" = exec-out -a "$(cat "$T/err")" = exec-err

out=$(printf 'piped\nin\n' | ctr_ task exec --exec-id e2 t-pod sh -c 'cat; exit 0' 2>&1)
rc=$?
echo "$out" | comment
check "ctr task exec: stdin to the process, its end closes it" \
	test "$rc" -eq 0 -a "$out" = "$(printf 'piped\nin')"

# The bound goes around script(1), not inside: a timeout(1) under
# script's shell makes a process group of its own, in the background of
# script's terminal, where ctr's tcsetattr (raw mode) stops it with
# SIGTTOU before it asks for the exec (whenever that shell forks for the
# command: dash, the harness's /bin/sh with no SHELL set, does). script's
# input is a FIFO held open here, never at its end: at an end of input
# script types ^D into the terminal, and typed before ctr makes it raw,
# the line discipline keeps it as a NUL, which ctr then forwards and the
# guest's terminal echoes (^@ before the tty's name).
mkfifo "$T/tty-in" && exec 7<>"$T/tty-in"
out=$(timeout 120 script -qec "exec ctr -a $SOCK -n kiln task exec -t --exec-id e3 t-pod sh -c 'tty; exit 5'" /dev/null <&7 2>&1)
rc=$?
exec 7<&-
echo "$out" | comment
if [ "$rc" -ne 5 ]; then
	# what the shim said, and the control API asked directly
	grep -a 'e3\|pty' "$T/containerd.log" | tail -n 20 | comment
	for s in /run/kiln-containerd/*/vm.sock; do
		timeout 20 "$O/vmmctl" call "$s" container.list 2>&1 | comment
		timeout 20 "$O/vmmctl" call "$s" pty.open \
			'{"argv":["sh","-c","tty"],"container":"t-pod","uid":0,"gid":0}' 2>&1 | comment
		echo "pty.open direct: status $?" | comment
	done
fi
check "ctr task exec -t: a terminal (/dev/pts/N) and the exit status (5, got $rc)" \
	test "$rc" -eq 5 -a -n "$(echo "$out" | grep '^/dev/pts/[0-9]')"

out=$(ctr_ task ps t-pod 2>&1)
rc=$?
echo "$out" | comment
check "ctr task ps: the container's processes" \
	test "$rc" -eq 0 -a "$(echo "$out" | grep -c '^[0-9]')" -ge 1

out=$(ctr_ task metrics t-pod 2>&1)
rc=$?
echo "$out" | comment
check "ctr task metrics: the VM's figures in the cgroup v2 shape" \
	test "$rc" -eq 0 -a -n "$(echo "$out" | grep -i 'memory')"

ctr_ task exec --exec-id e4 t-pod sleep 600 >/dev/null 2>&1 &
p=$!
for _ in $(seq 50); do
	ctr_ task ps t-pod 2>/dev/null | grep -c '^[0-9]' | grep -q '^[2-9]' && break
	sleep 0.2
done
ctr_ task kill --exec-id e4 -s SIGUSR1 t-pod 2>&1 | comment
wait $p
rc=$?
check "ctr task kill --exec-id -s SIGUSR1: the exec's status is 128+10 (got $rc)" test "$rc" -eq 138

ctr_ task kill -s SIGKILL t-pod 2>&1 | comment
for _ in $(seq 50); do
	ctr_ task ls 2>/dev/null | grep -q 't-pod.*STOPPED' && break
	sleep 0.2
done
ctr_ task rm t-pod 2>&1 | comment
ctr_ c rm t-pod 2>&1 | comment
check "ctr task kill -s SIGKILL, task rm, container rm: the VM is gone" no_vm_within 15

# 10. SIGTERM to a container's init that traps it
ctr_ run --rm --runtime $RT $IMG t-term sh -c 'trap "exit 42" TERM; while :; do sleep 1; done' \
	</dev/null >/dev/null 2>&1 &
p=$!
for _ in $(seq 150); do
	ctr_ task ls 2>/dev/null | grep -q 't-term.*RUNNING' && break
	sleep 0.2
done
sleep 1
ctr_ task kill -s SIGTERM t-term 2>&1 | comment
wait $p
rc=$?
check "ctr task kill -s SIGTERM: the init's trap's status (42, got $rc)" test "$rc" -eq 42

# 11. a signal that kills: exact 128+N
ctr_ run --rm --runtime $RT $IMG t-hup sh -c 'sleep 600 & wait' </dev/null >/dev/null 2>&1 &
p=$!
for _ in $(seq 150); do
	ctr_ task ls 2>/dev/null | grep -q 't-hup.*RUNNING' && break
	sleep 0.2
done
ctr_ task kill -s SIGKILL t-hup 2>&1 | comment
wait $p
rc=$?
check "ctr task kill -s SIGKILL: ctr run's status is 128+9 (got $rc)" test "$rc" -eq 137

# 12-13. the network policy annotation
echo granted-body >"$T/www/hello"
busybox httpd -f -p 192.0.2.10:8080 -h "$T/www" &
pids_to_stop+=($!)
# (busybox's nc: Debian's static busybox wget segfaults in a root without
# glibc's NSS files, on the host as in a VM)
fetch='printf "GET /hello HTTP/1.0\r\n\r\n" | nc -w 5 192.0.2.10 8080'
out=$(ctr_ run --rm --runtime $RT --annotation 'io.kiln.net.policy={"tcp":[]}' \
	$IMG t-deny sh -c "$fetch; echo fetch-status=\$?" 2>&1)
rc=$?
echo "$out" | comment
check "io.kiln.net.policy denying: the container runs, its flow gets nothing" \
	test "$rc" -eq 0 -a -z "$(echo "$out" | grep granted-body)" \
	-a -n "$(echo "$out" | grep '^fetch-status=[1-9]')"
out=$(ctr_ run --rm --runtime $RT \
	--annotation 'io.kiln.net.policy={"tcp":[{"to":"192.0.2.10","ports":[8080]}]}' \
	$IMG t-grant sh -c "$fetch" 2>&1)
rc=$?
echo "$out" | comment
check "io.kiln.net.policy granting: the upstream's body (status $rc)" \
	test "$rc" -eq 0 -a -n "$(echo "$out" | grep -x 'granted-body.\{0,1\}')" \
	-a -n "$(echo "$out" | grep '^HTTP/1.[01] 200')"

# 13b. the pod's network namespace (linux.namespaces' network path, as the
# CRI plugin gives a sandbox after CNI): the vmm runs in it, so a granted
# flow leaves from there, to an upstream only that namespace reaches
ip netns add kiln-pod && ip -n kiln-pod link set lo up &&
	ip -n kiln-pod addr add 198.51.100.10/32 dev lo || fail_all "the netns kiln-pod"
mkdir -p "$T/www-pod"
echo pod-body >"$T/www-pod/hello"
ip netns exec kiln-pod busybox httpd -f -p 198.51.100.10:8080 -h "$T/www-pod" &
pids_to_stop+=($!)
# from the test's own namespace there is no way there
printf 'GET /hello HTTP/1.0\r\n\r\n' | busybox nc -w 5 198.51.100.10 8080 >/dev/null 2>&1
direct=$?
out=$(ctr_ run --rm --runtime $RT --with-ns network:/run/netns/kiln-pod \
	--annotation 'io.kiln.net.policy={"tcp":[{"to":"198.51.100.10","ports":[8080]}]}' \
	$IMG t-netns sh -c "${fetch//192.0.2.10/198.51.100.10}" 2>&1)
rc=$?
echo "$out" | comment
check "the pod's network namespace: the VM's flow reaches its upstream (status $rc; from outside: $direct)" \
	test "$rc" -eq 0 -a "$direct" -ne 0 -a -n "$(echo "$out" | grep -x 'pod-body.\{0,1\}')"

# 14. an unknown io.kiln.* annotation
out=$(ctr_ run --rm --runtime $RT --annotation io.kiln.bogus=1 $IMG t-bogus true 2>&1)
rc=$?
echo "$out" | comment
ctr_ c rm t-bogus >/dev/null 2>&1
check "an unknown io.kiln.* annotation is refused, named" \
	test "$rc" -ne 0 -a -n "$(echo "$out" | grep 'io.kiln.bogus: unknown io.kiln.\* key')"

# 15. the shim killed: its VM goes, containerd's delete cleans up
ctr_ run -d --runtime $RT $IMG t-crash sleep 600 2>&1 | comment
shim=$(pgrep -f -- "containerd-shim-kiln-v2 -namespace kiln -id t-crash")
vmm=$(cat /run/kiln-containerd/*/vmm.pid 2>/dev/null)
echo "shim $shim vmm $vmm" | comment
gone=no
if [ -n "$shim" ] && [ -n "$vmm" ] && kill -0 "$vmm"; then
	kill -KILL "$shim"
	for _ in $(seq 150); do
		kill -0 "$vmm" 2>/dev/null || {
			gone=yes
			break
		}
		sleep 0.1
	done
fi
ctr_ task rm -f t-crash 2>&1 | comment
ctr_ c rm t-crash 2>&1 | comment
left=$(grep -c ' /run/kiln-containerd/' /proc/mounts)
check "SIGKILL to the shim: the VM goes within 15 s ($gone), delete leaves no mount ($left)" \
	test "$gone" = yes -a "$left" -eq 0

# 16a. a pod: containers with one sandbox id share one VM, each its own root
# The sandbox carries the pod's resources as the CRI plugin gives them
# (2 CPUs, 384 MiB: the VM gets 2 vCPUs and 384 + 64 MiB).
pod=(--runtime $RT --annotation io.kubernetes.cri.sandbox-id=pod1)
ctr_ run -d "${pod[@]}" --annotation io.kubernetes.cri.container-type=sandbox \
	--annotation io.kubernetes.cri.sandbox-cpu-quota=200000 \
	--annotation io.kubernetes.cri.sandbox-cpu-period=100000 \
	--annotation io.kubernetes.cri.sandbox-memory=$((384 << 20)) \
	$IMG pod1 sleep 600 2>&1 | comment
ctr_ run -d "${pod[@]}" --annotation io.kubernetes.cri.container-type=container \
	$IMG pod1-app sh -c 'echo app >/tmp/who; sleep 600' 2>&1 | comment
sleep 1
app=$(ctr_ task exec --exec-id w pod1-app cat /tmp/who 2>&1)
sandbox=$(ctr_ task exec --exec-id w pod1 sh -c 'cat /tmp/who 2>/dev/null || echo none' 2>&1)
podvms=$(vms | wc -l)
size=$(ctr_ task exec --exec-id s pod1-app sh -c 'echo $(nproc) $(grep MemTotal /proc/meminfo)' 2>&1)
read -r cpus _ memkb _ <<<"$size"
echo "app: $app; sandbox: $sandbox; VMs: $podvms; size: $size" | comment
for c in pod1-app pod1; do
	ctr_ task kill -s SIGKILL $c >/dev/null 2>&1
	sleep 1
	ctr_ task rm -f $c >/dev/null 2>&1
	ctr_ c rm $c >/dev/null 2>&1
done
check "a pod (one sandbox id): one VM for its two containers, each its own root" \
	test "$podvms" -eq 1 -a "$app" = app -a "$sandbox" = none
check "the pod's VM sized from the sandbox's CRI sizing: 2 vCPUs ($cpus), 384 to 448 MiB (${memkb:-?} kB)" \
	test "${cpus:-0}" = 2 -a "${memkb:-0}" -gt $((384 << 10)) -a "${memkb:-0}" -le $((448 << 10))
check "the pod's VM goes with its last container" no_vm_within 15

# 16. ten at once, each with its own VM and root
for i in $(seq 0 9); do
	ctr_ run -d --runtime $RT $IMG "t-many-$i" sh -c "echo $i >/tmp/mine; sleep 600" \
		>"$T/many-$i.log" 2>&1 &
done
wait_many() {
	local j
	for j in $(jobs -p); do
		case " ${pids_to_stop[*]} " in *" $j "*) continue ;; esac
		wait "$j"
	done
}
wait_many
running=$(ctr_ task ls 2>/dev/null | grep -c 't-many-.*RUNNING')
good=0
for i in $(seq 0 9); do
	comment <"$T/many-$i.log"
	[ "$(ctr_ task exec --exec-id r t-many-$i cat /tmp/mine 2>&1)" = "$i" ] &&
		good=$((good + 1))
done
vmms=$(vms | wc -l)
check "ten containers at once: $running running, $vmms VMs, $good saw their own /tmp" \
	test "$running" -eq 10 -a "$vmms" -eq 10 -a "$good" -eq 10
for i in $(seq 0 9); do
	ctr_ task kill -s SIGKILL "t-many-$i" >/dev/null 2>&1
done
sleep 1
for i in $(seq 0 9); do
	ctr_ task rm -f "t-many-$i" >/dev/null 2>&1
	ctr_ c rm "t-many-$i" >/dev/null 2>&1
done

# 17. nothing left behind
no_vm_within 15
for _ in $(seq 100); do
	[ -z "$(pgrep -f containerd-shim-kiln-v2)" ] && break
	sleep 0.1
done
left_vms=$(vms) left_shims=$(pgrep -f containerd-shim-kiln-v2)
left_mounts=$(grep ' /run/kiln-containerd/' /proc/mounts)
echo "left: VMs [$left_vms] shims [$left_shims] mounts [$left_mounts]" | comment
[ -z "$left_shims" ] || ps -o pid,args -p "$(echo $left_shims | tr ' ' ,)" | comment
ctr_ task ls 2>&1 | comment
check "no VM, shim or mount left" \
	test -z "$left_vms" -a -z "$left_shims" -a -z "$left_mounts"

if [ "$failed" -gt 0 ]; then
	echo "# containerd's log:"
	tail -n 60 "$T/containerd.log" | comment
fi
[ "$n" -eq "$TESTS" ] || echo "# ran $n of $TESTS"
[ "$failed" -eq 0 ]
