// SPDX-License-Identifier: GPL-2.0
/*
 * vmm start --baseline-cache DIR (Documentation/snapshots.md,
 * "Baselines"): a VM starts from the cache's snapshot of its identity
 * when there is a valid one, and otherwise boots cold and saves one when
 * its agent is first ready, before any workload reached it.
 *
 * The build step (vm__baseline_open) runs after the identity is known
 * and before KVM: it checks the cache's modes, looks the identity up
 * (a found entry is verified as --restore would and leased: vm->restore
 * is set, and the restore steps take it from there), evicts beyond the
 * bounds, and, when it will capture, makes the capture's directory and
 * takes its exclusive lease, all before any seccomp filter. The capture
 * (vm__baseline_capture) runs on the control API's thread from its
 * agent-ready callback: vm.snapshot into that directory, then one
 * renameat2 (the API filter's baseline group) puts it in place.
 *
 * A candidate that cannot be used is discarded, and the VM boots cold
 * once, with one log line saying why. A restore is only ever a latency
 * optimisation.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "devices/block/store-cow.h"
#include "snapshot/baseline.h"
#include "snapshot/load.h"
#include "vmm/baseline-vm.h"
#include "vmm/snapshot.h"
#include "vmm/vm.h"

#define BASELINE_WHY_LEN 512
#define MS_PER_S	 1000.0
#define NS_PER_MS	 1000000.0

enum baseline_result {
	BASELINE_COLD,	   /* booted cold; a capture may follow */
	BASELINE_RESTORED, /* restored from the cache's entry */
	BASELINE_CAPTURED, /* booted cold, and saved the entry */
};

struct vm_baseline {
	const char *cache; /* the config's */
	int cache_fd;
	char key[BASELINE_KEY_LEN + 1];
	char *entry_path; /* cache/key: the restore's directory */
	int lease_fd;	  /* LOCK_SH on the entry while restored; -1 */
	/* The capture: its directory under LOCK_EX (-1: none planned). */
	int tmp_fd;
	char tmp[BASELINE_TMP_NAME_LEN];
	char *tmp_path;
	enum baseline_result result;
	char why[BASELINE_WHY_LEN]; /* BASELINE_COLD: why; "" */
	double capture_ms;
};

/*
 * What a baseline must not hold: the VM boots cold and nothing is
 * saved. NULL: nothing.
 */
static const char *unsupported(const struct vm *vm)
{
	const struct vm_config *c = vm->cfg;

	if (c->rootfs.descriptor && c->rootfs.mode == ROOTFS_PERSISTENT)
		return "a persistent root is one VM's own state, not a "
		       "baseline's (--rootfs-mode ephemeral or readonly)";
	/*
	 * A cow root's entry holds to its store's state token: only a start
	 * on that store, unchanged since, restores from it (vmm/restore.c).
	 */
	if (c->rootfs.descriptor && c->rootfs.mode == ROOTFS_COW &&
	    (!vm->store_cow || !store_cow__hello_token(vm->store_cow)->len))
		return "a cow root's block store gives no state token, so a "
		       "baseline could not tell its changes apart";
	/*
	 * The CA is made for each start, its key in that monitor only: a
	 * clone would trust the capture's, not its own monitor's.
	 */
	if (vm->guest_ca_len)
		return "the guest trusts this start's own interception CA "
		       "(the policy has http grants)";
	return NULL;
}

static char *join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}

/* The lookup: 0 with vm->restore set, or why the VM boots cold. */
static int lookup(struct vm *vm, struct vm_baseline *b, bool *capture)
{
	char digest[VM_IDENTITY_DIGEST_LEN];
	struct snap_expect want = {
		.vmm = KILN_VERSION,
		.identity_digest = digest,
		.vcpus = vm->nr_vcpus,
		.memory_bytes = vm->ram_size,
		/* Each clone takes its own copy of the entry's layer. */
		.root_layer =
			vm->disk && vm->cfg->rootfs.mode == ROOTFS_EPHEMERAL,
	};
	struct snap_load *l;
	int ret;

	ret = vm__snapshot_identity_digest(vm, digest, sizeof(digest), NULL);
	if (!ret)
		ret = baseline__key(digest, b->key);
	if (ret) {
		pr_err("--baseline-cache %s: this config's identity: %s",
		       b->cache, strerror(-ret));
		return ret;
	}
	b->entry_path = join(b->cache, b->key);
	if (!b->entry_path)
		return -ENOMEM;
	*capture = true;
	if (vm->cfg->baseline.no_lookup) {
		/* main()'s cold retry: the candidate's line was logged. */
		snprintf(b->why, sizeof(b->why), "the restore failed");
		return 0;
	}
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	ret = baseline__lookup(b->cache_fd, b->cache, b->key, &want, l,
			       &b->lease_fd, b->why, sizeof(b->why));
	if (!ret) {
		vm->restore = l;
		vm->restore_dir = b->entry_path;
		b->result = BASELINE_RESTORED;
		pr_info("baseline %s: restoring from %s", b->cache, b->key);
		*capture = false;
		return 0;
	}
	free(l);
	if (ret == -ENOENT) {
		snprintf(b->why, sizeof(b->why),
			 "no entry for this configuration");
		pr_info("baseline %s: no entry for %s; booting cold, saving "
			"one when the agent is ready",
			b->cache, b->key);
		return 0;
	}
	/* A held exclusive lease: someone writes or removes it. Let be. */
	*capture = ret != -EWOULDBLOCK;
	pr_warn("baseline %s/%s: discarded (%s); booting cold", b->cache,
		b->key, b->why);
	return 0;
}

int vm__baseline_open(struct vm *vm)
{
	const struct baseline_config *cfg = &vm->cfg->baseline;
	char err[BASELINE_WHY_LEN];
	struct vm_baseline *b;
	const char *no;
	bool capture = false;
	int ret;

	if (!cfg->cache)
		return 0;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->cache = cfg->cache;
	b->cache_fd = b->lease_fd = b->tmp_fd = -1;
	vm->baseline = b;
	no = unsupported(vm);
	if (no) {
		snprintf(b->why, sizeof(b->why), "%s", no);
		pr_info("baseline %s: not used: %s; booting cold", b->cache,
			no);
		return 0;
	}
	/* An unsafe cache is the operator's to fix: refused, not skipped. */
	ret = baseline__open_cache(b->cache, &b->cache_fd, err, sizeof(err));
	if (ret) {
		pr_err("--baseline-cache %s", err);
		return ret;
	}
	ret = lookup(vm, b, &capture);
	if (ret)
		return ret;
	/* A capture adds an entry: room for it first. */
	ret = baseline__evict(b->cache_fd,
			      capture ? cfg->max_artifacts - 1 :
					cfg->max_artifacts,
			      cfg->max_bytes);
	if (ret < 0)
		pr_warn("baseline %s: eviction: %s", b->cache, strerror(-ret));
	if (!capture)
		return 0;
	ret = baseline__make_tmp(b->cache_fd, b->key, &b->tmp_fd, b->tmp, err,
				 sizeof(err));
	b->tmp_path = ret ? NULL : join(b->cache, b->tmp);
	if (ret || !b->tmp_path) {
		pr_warn("baseline %s: no baseline will be saved: %s", b->cache,
			ret ? err : strerror(ENOMEM));
		if (b->tmp_fd >= 0)
			close(b->tmp_fd);
		b->tmp_fd = -1;
	}
	return 0;
}

void vm__baseline_close(struct vm *vm)
{
	struct vm_baseline *b = vm->baseline;

	if (!b)
		return;
	if (vm->restore_dir == b->entry_path)
		vm->restore_dir = vm->cfg->restore_dir;
	if (b->tmp_fd >= 0)
		close(b->tmp_fd); /* a capture never made: the sweep's */
	if (b->lease_fd >= 0)
		close(b->lease_fd);
	if (b->cache_fd >= 0)
		close(b->cache_fd);
	free(b->entry_path);
	free(b->tmp_path);
	free(b);
	vm->baseline = NULL;
}

bool vm__baseline_restoring(const struct vm *vm)
{
	return vm->baseline && vm->baseline->result == BASELINE_RESTORED;
}

int vm__baseline_failed(struct vm *vm, int err)
{
	struct vm_baseline *b = vm->baseline;

	pr_warn("baseline %s/%s: discarded (the restore failed: %s, above); "
		"booting cold",
		b->cache, b->key, strerror(-err));
	/*
	 * Removed here (the cold retry looks nothing up), under this VM's
	 * lease made exclusive; if another VM holds one, the entry stays.
	 */
	if (b->lease_fd >= 0 &&
	    !baseline__discard(b->cache_fd, b->key, b->lease_fd))
		pr_info("baseline %s: removed %s", b->cache, b->key);
	return VM_BASELINE_COLD;
}

bool vm__baseline_needs_publish(const struct vm *vm)
{
	return vm->baseline && vm->baseline->tmp_fd >= 0;
}

static double ms_since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) * MS_PER_S +
	       (double)(t1.tv_nsec - t0->tv_nsec) / NS_PER_MS;
}

void vm__baseline_capture(struct vm *vm)
{
	struct vm_baseline *b = vm->baseline;
	char err[BASELINE_WHY_LEN];
	struct timespec t0;
	int ret;

	if (!b || b->tmp_fd < 0)
		return;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ret = vm__snapshot(vm, b->tmp_path, true, err, sizeof(err));
	if (!ret)
		ret = baseline__publish(b->cache_fd, b->tmp, b->key, err,
					sizeof(err));
	/* The exclusive lease ends; a failed capture's directory is swept. */
	close(b->tmp_fd);
	b->tmp_fd = -1;
	if (ret) {
		snprintf(b->why, sizeof(b->why), "not saved: %.480s", err);
		pr_warn("baseline %s: no baseline saved: %s", b->cache, err);
		return;
	}
	b->capture_ms = ms_since(&t0);
	b->result = BASELINE_CAPTURED;
	b->why[0] = '\0';
	pr_info("baseline %s: saved %s in %.1f ms", b->cache, b->key,
		b->capture_ms);
}

void vm__baseline_capture_detached(struct vm *vm, int err, const char *why)
{
	struct vm_baseline *b = vm->baseline;

	if (!b || b->tmp_fd < 0)
		return;
	if (!err) {
		vm__baseline_capture(vm);
		return;
	}
	/* A mount still attached would be frozen: nothing is saved. */
	close(b->tmp_fd);
	b->tmp_fd = -1;
	snprintf(b->why, sizeof(b->why), "not saved: %.480s", why);
	pr_warn("baseline %s: no baseline saved: the mounts could not be "
		"detached: %s",
		b->cache, why);
}

void vm__baseline_attach_failed(struct vm *vm, const char *why)
{
	struct vm_baseline *b = vm->baseline;

	if (!vm__baseline_restoring(vm))
		return;
	/*
	 * Not the cold retry the other restore errors get: the monitor's
	 * threads run under their filters by now, and a new VM cannot be
	 * built in this process (Documentation/snapshots.md).
	 */
	pr_err("baseline %s/%s: the restored VM's mounts could not be "
	       "attached (%s)",
	       b->cache, b->key, why);
}

json_t *vm__baseline_status(const struct vm *vm)
{
	static const char *const results[] = {
		[BASELINE_COLD] = "cold",
		[BASELINE_RESTORED] = "restored",
		[BASELINE_CAPTURED] = "captured",
	};
	const struct vm_baseline *b = vm->baseline;
	json_t *o;

	if (!b)
		return NULL;
	o = json_pack("{s:s, s:s}", "cache", b->cache, "result",
		      results[b->result]);
	if (o && b->key[0])
		json_object_set_new(o, "entry", json_string(b->key));
	if (o && b->why[0])
		json_object_set_new(o, "why", json_string(b->why));
	if (o && b->result == BASELINE_CAPTURED)
		json_object_set_new(o, "captureMs", json_real(b->capture_ms));
	return o;
}
