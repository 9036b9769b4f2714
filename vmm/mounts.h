/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_MOUNTS_H
#define KILN_MOUNTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/compiler.h"
#include "lib/log.h"
#include "devices/fs/passthrough.h"

/*
 * The guest's virtio-fs mounts (Documentation/virtio-fs.md): each maps an
 * absolute guest path to a source, one virtio-fs device (tag "kilnN") per
 * mount. This module owns their configuration: the CLI form, the JSON
 * form, validation, the backend each becomes, and the manifest the guest
 * init reads (/kiln/mounts).
 */

#define MOUNTS_MAX	 8U    /* virtio-mmio slots 2..9 */
#define MOUNTS_FILES_MAX 1024U /* memory: seeded files */
#define MOUNTS_MASKS_MAX 64U   /* bind: masked paths */
#define MOUNTS_PATH_MAX	 4096U

enum mount_type {
	MOUNT_BIND,
	MOUNT_MEMORY,
	MOUNT_VIRTUAL,
};

struct mount_file {
	char *path;
	char *data;
	size_t len;
};

struct mount_config {
	char *guest_path; /* absolute, normalised */
	enum mount_type type;
	/* bind */
	char *source;
	bool read_only;
	char **mask_paths;
	unsigned int nr_mask_paths;
	char *mask_storage;
	enum fs_ownership ownership; /* DEFAULT unless "ownership" says */
	/* memory */
	struct mount_file *files;
	unsigned int nr_files;
	uint64_t max_bytes; /* 0: the backend's default */
	/* virtual */
	char *socket;
	unsigned int timeout_ms; /* 0: the backend's default */
};

struct mounts_config {
	struct mount_config m[MOUNTS_MAX];
	unsigned int nr;
};

struct fs_backend;

void mounts__free(struct mounts_config *mc);
/*
 * --mount GUEST=bind:SOURCE[:ro|:rw][:mapped|:squash|:passthrough],
 * GUEST=memory[:MAXBYTES] or
 * GUEST=virtual:SOCKET. err receives "what: why".
 */
int __must_check mounts__parse_cli(struct mounts_config *mc, const char *spec,
				   char *err, size_t errlen);
/* "mounts": {"/guest/path": {"bind": {...}} | {"memory": {...}} | ...}. */
int __must_check mounts__parse_json(struct mounts_config *mc, void *json_obj,
				    char *err, size_t errlen);
/* Everything but what needs the host: paths, duplicates, nesting. */
int __must_check mounts__validate(const struct mounts_config *mc, char *err,
				  size_t errlen);
/*
 * The backend for mount i (opens its host side; reports once on error);
 * a bind mount's descriptors charged to fds too (the VM's budget).
 */
int __must_check mounts__create_backend(const struct mount_config *m,
					unsigned int index,
					struct fd_budget *fds,
					struct fs_backend **out);
/* "kiln<index>": the mount's virtio-fs tag. */
void mounts__tag(unsigned int index, char *buf, size_t len);
/*
 * The guest's manifest: per mount "tag\0path\0ro|rw\0". Caller frees.
 */
int __must_check mounts__manifest(const struct mounts_config *mc, uint8_t **out,
				  size_t *len);
/*
 * The same list, in the same order, as the agent's MOUNTS_DETACH and
 * MOUNTS_ATTACH payload (proto/mounts.h) into b.
 */
struct kiln_buf;
int __must_check mounts__agent_list(const struct mounts_config *mc,
				    struct kiln_buf *b);

#endif
