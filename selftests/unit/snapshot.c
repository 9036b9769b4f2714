// SPDX-License-Identifier: GPL-2.0
/*
 * A snapshot's files without KVM (snapshot/file.h,
 * snapshot/state.h): the sparse memory file (a mostly-zero buffer
 * gives a file with holes that SEEK_DATA skips, and a digest computed
 * here independently of the writer), parts and the manifest, whose
 * digests verify and whose corruption does not, the directory's modes
 * (refused when not owner-only, whatever the umask when made), files
 * never overwritten or followed, the state files' sections, round
 * trip and truncation, and archives (snapshot/archive.h): a round
 * trip that keeps holes and digests, and damaged, hostile or misplaced
 * ones refused with nothing left behind.
 */
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include <wolfssl/options.h>
#include <wolfssl/wolfcrypt/sha256.h>

#include "selftests/kselftest.h"
#include "selftests/testutil.h"
#include "snapshot/archive.h"
#include "snapshot/file.h"
#include "snapshot/state.h"

#define MEM_SIZE (64ULL << 20) /* a guest of 64 MiB */
#define PAGE	 SNAP_PAGE_SIZE

static void hex_of(const uint8_t *md, char *out)
{
	for (int i = 0; i < WC_SHA256_DIGEST_SIZE; i++)
		sprintf(out + 2 * i, "%02x", md[i]);
}

/* The pages digest, from its definition, over the buffer itself. */
static void pages_digest(const uint8_t *mem, uint64_t size, char *hex)
{
	static const uint8_t zero[PAGE];
	uint8_t md[WC_SHA256_DIGEST_SIZE];
	wc_Sha256 sha;
	uint64_t le;

	wc_InitSha256(&sha);
	for (uint64_t off = 0; off < size; off += PAGE) {
		if (!memcmp(mem + off, zero, PAGE))
			continue;
		le = htole64(off);
		wc_Sha256Update(&sha, (const uint8_t *)&le, 8);
		wc_Sha256Update(&sha, mem + off, PAGE);
	}
	le = htole64(size);
	wc_Sha256Update(&sha, (const uint8_t *)&le, 8);
	wc_Sha256Final(&sha, md);
	wc_Sha256Free(&sha);
	hex_of(md, hex);
}

static const json_t *part_named(const json_t *m, const char *file)
{
	const json_t *parts = json_object_get(m, "parts");

	for (size_t i = 0; i < json_array_size(parts); i++) {
		const json_t *p = json_array_get(parts, i);

		if (!strcmp(json_string_value(json_object_get(p, "file")),
			    file))
			return p;
	}
	return NULL;
}

/* A 64 MiB guest with four pages that are not zero, two of them in a row. */
static uint8_t *guest(void)
{
	uint8_t *mem = mmap(NULL, MEM_SIZE, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (mem == MAP_FAILED)
		return NULL;
	memset(mem + 0, 0x11, 16);
	memset(mem + 5 * PAGE + 100, 0x22, 1);
	memset(mem + 6 * PAGE, 0x33, PAGE);
	mem[MEM_SIZE - 1] = 0x44; /* the very last byte */
	return mem;
}

/* One whole snapshot: two parts, memory, the manifest. */
static int write_all(struct snap_tmp *t, const uint8_t *mem, char *err,
		     size_t len)
{
	json_t *fields = json_pack("{s:s, s:I}", "vmm", "test", "memoryBytes",
				   (json_int_t)MEM_SIZE);
	struct snap_dir d;
	int ret;

	ret = snap_dir__create(&d, t->dir, err, len);
	if (ret)
		goto out;
	ret = snap_dir__write_part(&d, "a.state", "vcpu", "hello", 5, err, len);
	if (!ret)
		ret = snap_dir__write_part(&d, "empty", "devices", "", 0, err,
					   len);
	if (!ret)
		ret = snap_dir__write_memory(&d, "memory.raw", mem, MEM_SIZE,
					     err, len);
	if (!ret)
		ret = snap_dir__finish(&d, fields, err, len);
	snap_dir__close(&d);
out:
	json_decref(fields);
	return ret;
}

TEST(memory_file_is_sparse_and_its_digest_verifies)
{
	char err[512] = "", path[160], want[SNAP_SHA256_HEX + 1];
	char got[SNAP_SHA256_HEX + 1];
	json_t *m = NULL;
	const json_t *p;
	uint8_t *mem = guest(), page[PAGE];
	struct stat st;
	struct snap_tmp t;
	off_t at;
	int fd;

	ASSERT_NE(NULL, mem);
	ASSERT_TRUE(snap_tmp__make(&t, "kiln-snap"));
	ASSERT_EQ(0, write_all(&t, mem, err, sizeof(err))) TH_LOG("%s", err);

	snprintf(path, sizeof(path), "%s/memory.raw", t.dir);
	fd = open(path, O_RDONLY);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, fstat(fd, &st));
	EXPECT_EQ((off_t)MEM_SIZE, st.st_size);
	/* Four pages of data; allow the file system some metadata. */
	EXPECT_GT(64 * PAGE, (uint64_t)st.st_blocks * 512)
	TH_LOG("%lld blocks", (long long)st.st_blocks);
	/* The holes: from page 1 on, the next data is page 5. */
	at = lseek(fd, PAGE, SEEK_DATA);
	if (at < 0 && errno == EINVAL)
		SKIP(goto out, "no SEEK_DATA on this file system");
	EXPECT_EQ((off_t)(5 * PAGE), at);
	EXPECT_EQ((off_t)(7 * PAGE), lseek(fd, 5 * PAGE, SEEK_HOLE));
	EXPECT_EQ((off_t)(MEM_SIZE - PAGE), lseek(fd, 7 * PAGE, SEEK_DATA));
	/* The data is the guest's. */
	ASSERT_EQ((ssize_t)PAGE, pread(fd, page, PAGE, 6 * PAGE));
	EXPECT_EQ(0, memcmp(page, mem + 6 * PAGE, PAGE));

	pages_digest(mem, MEM_SIZE, want);
	ASSERT_EQ(0, snap_file__pages_sha256(fd, got));
	EXPECT_STREQ(want, got);
	ASSERT_EQ(0, snap_dir__verify(t.dir, &m, err, sizeof(err)))
	TH_LOG("%s", err);
	p = part_named(m, "memory.raw");
	ASSERT_NE(NULL, p);
	EXPECT_STREQ(want, json_string_value(json_object_get(p, "sha256")));
	EXPECT_STREQ("pages", json_string_value(json_object_get(p, "digest")));
	EXPECT_EQ(4 * PAGE,
		  json_integer_value(json_object_get(p, "dataBytes")));
	EXPECT_EQ(MEM_SIZE, json_integer_value(json_object_get(p, "bytes")));
out:
	json_decref(m);
	close(fd);
	munmap(mem, MEM_SIZE);
	snap_tmp__clean(&t);
}

TEST(parts_and_manifest)
{
	char err[512] = "", path[160], cmd[256], line[128];
	uint8_t *mem = guest();
	json_t *m = NULL;
	const json_t *p;
	struct stat st;
	struct snap_tmp t;
	FILE *f;

	ASSERT_NE(NULL, mem);
	ASSERT_TRUE(snap_tmp__make(&t, "kiln-snap"));
	ASSERT_EQ(0, write_all(&t, mem, err, sizeof(err))) TH_LOG("%s", err);
	ASSERT_EQ(0, snap_dir__verify(t.dir, &m, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(SNAP_FORMAT_VERSION,
		  json_integer_value(json_object_get(m, "format")));
	EXPECT_STREQ("test", json_string_value(json_object_get(m, "vmm")));
	EXPECT_EQ(3, json_array_size(json_object_get(m, "parts")));
	p = part_named(m, "a.state");
	ASSERT_NE(NULL, p);
	EXPECT_STREQ("vcpu", json_string_value(json_object_get(p, "kind")));
	EXPECT_EQ(5, json_integer_value(json_object_get(p, "bytes")));
	/* sha256sum's digest, for a part of kind file. */
	snprintf(cmd, sizeof(cmd), "sha256sum '%s/a.state'", t.dir);
	f = popen(cmd, "r");
	ASSERT_NE(NULL, f);
	ASSERT_NE(NULL, fgets(line, sizeof(line), f));
	pclose(f);
	EXPECT_EQ(0,
		  strncmp(line, json_string_value(json_object_get(p, "sha256")),
			  SNAP_SHA256_HEX));
	EXPECT_STREQ("2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e7304"
		     "3362938b9824",
		     json_string_value(json_object_get(p, "sha256")));
	/* Owner only: the directory 0700, every file 0600. */
	ASSERT_EQ(0, stat(t.dir, &st));
	EXPECT_EQ(0700, st.st_mode & 07777);
	snprintf(path, sizeof(path), "%s/%s", t.dir, SNAP_MANIFEST);
	ASSERT_EQ(0, stat(path, &st));
	EXPECT_EQ(0600, st.st_mode & 07777);
	snprintf(path, sizeof(path), "%s/memory.raw", t.dir);
	ASSERT_EQ(0, stat(path, &st));
	EXPECT_EQ(0600, st.st_mode & 07777);
	json_decref(m);
	munmap(mem, MEM_SIZE);
	snap_tmp__clean(&t);
}

/* Flip one byte of file at off (or truncate it to off: flip false). */
static void damage(struct __test_metadata *_metadata, const char *dir,
		   const char *file, off_t off, bool flip)
{
	char path[160];
	uint8_t b = 0;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_RDWR);
	ASSERT_LE(0, fd);
	if (flip) {
		ASSERT_EQ(1, pread(fd, &b, 1, off));
		b ^= 0x01;
		ASSERT_EQ(1, pwrite(fd, &b, 1, off));
	} else {
		ASSERT_EQ(0, ftruncate(fd, off));
	}
	close(fd);
}

TEST(damage_fails_verification)
{
	static const struct {
		const char *file;
		off_t off;
		bool flip;
		int err;
	} cases[] = {
		{ "a.state", 2, true, -EBADMSG },
		{ "memory.raw", 6 * PAGE + 7, true, -EBADMSG },
		/* A byte in a hole: a page of data where there was none. */
		{ "memory.raw", 20 * PAGE, true, -EBADMSG },
		{ "memory.raw", MEM_SIZE - PAGE, false, -EBADMSG },
		{ SNAP_MANIFEST, 0, true, -EINVAL },
	};
	uint8_t *mem = guest();
	char err[512];
	json_t *m = NULL;

	ASSERT_NE(NULL, mem);
	for (unsigned int i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct snap_tmp t;

		ASSERT_TRUE(snap_tmp__make(&t, "kiln-snap"));
		err[0] = '\0';
		ASSERT_EQ(0, write_all(&t, mem, err, sizeof(err)))
		TH_LOG("%s", err);
		damage(_metadata, t.dir, cases[i].file, cases[i].off,
		       cases[i].flip);
		EXPECT_EQ(cases[i].err,
			  snap_dir__verify(t.dir, &m, err, sizeof(err)))
		TH_LOG("case %u: %s", i, err);
		EXPECT_EQ(NULL, m);
		snap_tmp__clean(&t);
	}
	munmap(mem, MEM_SIZE);
}

/* The files in dir (a verification cache): how many. */
static int nr_files(const char *dir)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

/*
 * A good hash of a big part (memory.raw) is remembered in the
 * verification cache (KILN_CACHE), one entry, and a later verify of the
 * same files passes; a changed byte moves the file's ctime, so the entry
 * no longer vouches and the change is found as without a cache.
 */
TEST(verified_memory_is_remembered_until_it_changes)
{
	uint8_t *mem = guest();
	char err[512] = "", cache[160], dir[200];
	json_t *m = NULL;
	struct snap_tmp t;

	ASSERT_NE(NULL, mem);
	ASSERT_TRUE(snap_tmp__make(&t, "kiln-snap"));
	snprintf(cache, sizeof(cache), "%s/cache", t.base);
	snprintf(dir, sizeof(dir), "%s/verified", cache);
	ASSERT_EQ(0, setenv("KILN_CACHE", cache, 1));
	ASSERT_EQ(0, write_all(&t, mem, err, sizeof(err))) TH_LOG("%s", err);
	/* Older than the racily-clean window (changed_too_recently). */
	usleep(300 * 1000);
	ASSERT_EQ(0, snap_dir__verify(t.dir, &m, err, sizeof(err)))
	TH_LOG("%s", err);
	json_decref(m);
	m = NULL;
	EXPECT_EQ(1, nr_files(dir));
	ASSERT_EQ(0, snap_dir__verify(t.dir, &m, err, sizeof(err)))
	TH_LOG("%s", err);
	json_decref(m);
	m = NULL;

	damage(_metadata, t.dir, "memory.raw", 6 * PAGE + 7, true);
	EXPECT_EQ(-EBADMSG, snap_dir__verify(t.dir, &m, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(NULL, m);
	unsetenv("KILN_CACHE");
	munmap(mem, MEM_SIZE);
	snap_tmp__clean(&t);
}

TEST(directory_modes)
{
	char err[512], path[160], link[160];
	struct snap_dir d;
	struct stat st;
	struct snap_tmp t;
	mode_t old;

	ASSERT_TRUE(snap_tmp__make(&t, "kiln-snap"));
	/* An existing directory that others may read: refused. */
	ASSERT_EQ(0, mkdir(t.dir, 0755));
	ASSERT_EQ(0, chmod(t.dir, 0755));
	EXPECT_EQ(-EPERM, snap_dir__create(&d, t.dir, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "0755")) TH_LOG("%s", err);
	ASSERT_EQ(0, chmod(t.dir, 0710));
	EXPECT_EQ(-EPERM, snap_dir__create(&d, t.dir, err, sizeof(err)));
	/* Owner-only: taken. */
	ASSERT_EQ(0, chmod(t.dir, 0700));
	ASSERT_EQ(0, snap_dir__create(&d, t.dir, err, sizeof(err)))
	TH_LOG("%s", err);
	/* A file of the same name is never overwritten. */
	ASSERT_EQ(0, snap_dir__write_part(&d, "x", "vm", "1", 1, err,
					  sizeof(err)));
	EXPECT_EQ(-EEXIST, snap_dir__write_part(&d, "x", "vm", "2", 1, err,
						sizeof(err)));
	EXPECT_EQ(-EINVAL, snap_dir__write_part(&d, "../x", "vm", "2", 1, err,
						sizeof(err)));
	/* Nor a symbolic link followed. */
	snprintf(path, sizeof(path), "%s/link", t.dir);
	ASSERT_EQ(0, symlink("/tmp/kiln-snap-not-there", path));
	EXPECT_EQ(-EEXIST, snap_dir__write_part(&d, "link", "vm", "2", 1, err,
						sizeof(err)));
	snap_dir__close(&d);
	snprintf(link, sizeof(link), "%s/dirlink", t.base);
	ASSERT_EQ(0, symlink(t.dir, link));
	EXPECT_GT(0, snap_dir__create(&d, link, err, sizeof(err)))
	TH_LOG("%s", err);
	/* Made here: 0700 and 0600 whatever the umask lets through. */
	snprintf(path, sizeof(path), "%s/made", t.base);
	old = umask(0);
	ASSERT_EQ(0, snap_dir__create(&d, path, err, sizeof(err)));
	ASSERT_EQ(0, snap_dir__write_part(&d, "y", "vm", "1", 1, err,
					  sizeof(err)));
	snap_dir__close(&d);
	umask(old);
	ASSERT_EQ(0, stat(path, &st));
	EXPECT_EQ(0700, st.st_mode & 07777);
	snprintf(path, sizeof(path), "%s/made/y", t.base);
	ASSERT_EQ(0, stat(path, &st));
	EXPECT_EQ(0600, st.st_mode & 07777);
	/* Verifying refuses the same modes a writer would. */
	snprintf(path, sizeof(path), "%s/made", t.base);
	ASSERT_EQ(0, chmod(path, 0755));
	EXPECT_EQ(-EPERM, snap_dir__verify(path, &(json_t *){ NULL }, err,
					   sizeof(err)));
	snap_tmp__clean(&t);
}

TEST(memory_of_partial_pages_refused)
{
	char err[256];
	struct snap_dir d;
	struct snap_tmp t;
	static uint8_t mem[PAGE + 1];

	ASSERT_TRUE(snap_tmp__make(&t, "kiln-snap"));
	ASSERT_EQ(0, snap_dir__create(&d, t.dir, err, sizeof(err)));
	EXPECT_EQ(-EINVAL, snap_dir__write_memory(&d, "m", mem, sizeof(mem),
						  err, sizeof(err)));
	snap_dir__close(&d);
	snap_tmp__clean(&t);
}

/* ---- state files -------------------------------------------------- */

TEST(state_sections_round_trip)
{
	static const uint8_t three[3] = { 1, 2, 3 };
	uint8_t big[1000];
	struct snap_writer w;
	struct snap_reader r;
	const void *data;
	uint32_t tag, len;

	for (unsigned int i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7);
	snap_writer__init(&w, SNAP_KIND_VCPU);
	snap_writer__add(&w, SNAP_VCPU_ID, &(uint32_t){ 3 }, 4);
	snap_writer__add(&w, SNAP_VCPU_REGS, three, sizeof(three));
	snap_writer__add(&w, SNAP_VCPU_XSAVE, big, sizeof(big));
	snap_writer__add(&w, SNAP_VCPU_LAPIC, NULL, 0);
	ASSERT_EQ(0, w.err);
	EXPECT_EQ(0, w.len % SNAP_STATE_ALIGN);

	ASSERT_EQ(0, snap_reader__init(&r, w.buf, w.len, SNAP_KIND_VCPU));
	ASSERT_EQ(1, snap_reader__next(&r, &tag, &data, &len));
	EXPECT_EQ(SNAP_VCPU_ID, tag);
	EXPECT_EQ(4, len);
	ASSERT_EQ(1, snap_reader__next(&r, &tag, &data, &len));
	EXPECT_EQ(SNAP_VCPU_REGS, tag);
	ASSERT_EQ(3, len);
	EXPECT_EQ(0, memcmp(data, three, 3));
	ASSERT_EQ(1, snap_reader__next(&r, &tag, &data, &len));
	ASSERT_EQ(sizeof(big), len);
	EXPECT_EQ(0, memcmp(data, big, sizeof(big)));
	ASSERT_EQ(1, snap_reader__next(&r, &tag, &data, &len));
	EXPECT_EQ(SNAP_VCPU_LAPIC, tag);
	EXPECT_EQ(0, len);
	EXPECT_EQ(0, snap_reader__next(&r, &tag, &data, &len));

	/* By tag, with the size the restore expects. */
	EXPECT_EQ(0, snap_state__find(w.buf, w.len, SNAP_KIND_VCPU,
				      SNAP_VCPU_XSAVE, sizeof(big), &data));
	EXPECT_EQ(0, memcmp(data, big, sizeof(big)));
	EXPECT_EQ(-EINVAL, snap_state__find(w.buf, w.len, SNAP_KIND_VCPU,
					    SNAP_VCPU_REGS, 4, &data));
	EXPECT_EQ(-ENOENT, snap_state__find(w.buf, w.len, SNAP_KIND_VCPU,
					    SNAP_VCPU_SREGS, 4, &data));
	/* Another kind, another version: not this file. */
	EXPECT_EQ(-EINVAL, snap_reader__init(&r, w.buf, w.len, SNAP_KIND_VM));
	w.buf[8] ^= 0xff;
	EXPECT_EQ(-EINVAL, snap_reader__init(&r, w.buf, w.len, SNAP_KIND_VCPU));
	w.buf[8] ^= 0xff;
	snap_writer__release(&w);
}

/* Every truncation is refused somewhere, and never read past. */
TEST(state_truncated_or_lying)
{
	struct snap_writer w;
	struct snap_reader r;
	const void *data;
	uint32_t tag, len, huge = htole32(SNAP_STATE_MAX_SECTION + 1);
	uint8_t *copy;
	int ret;

	snap_writer__init(&w, SNAP_KIND_VM);
	snap_writer__add(&w, SNAP_VM_CLOCK, "0123456789", 10);
	snap_writer__add(&w, SNAP_VM_PIT2, "ab", 2);
	ASSERT_EQ(0, w.err);
	for (size_t n = 0; n < w.len; n++) {
		bool refused = false;

		/* An exact copy, so that a read past it is ASan's to see. */
		copy = malloc(n ? n : 1);
		ASSERT_NE(NULL, copy);
		memcpy(copy, w.buf, n);
		ret = snap_reader__init(&r, copy, n, SNAP_KIND_VM);
		if (ret)
			refused = true;
		while (!ret &&
		       (ret = snap_reader__next(&r, &tag, &data, &len)) == 1)
			ret = 0;
		if (ret < 0)
			refused = true;
		/* Ending on a section boundary is a shorter, valid file. */
		if (n != 16 && n != 16 + 8 + 16)
			EXPECT_TRUE(refused) TH_LOG("length %zu", n);
		free(copy);
	}
	/* A length past the end, or over the section limit. */
	memcpy(w.buf + 16 + 4, &huge, 4);
	ASSERT_EQ(0, snap_reader__init(&r, w.buf, w.len, SNAP_KIND_VM));
	EXPECT_EQ(-EINVAL, snap_reader__next(&r, &tag, &data, &len));
	snap_writer__release(&w);

	snap_writer__init(&w, SNAP_KIND_VM);
	snap_writer__add(&w, 1, "x", SNAP_STATE_MAX_SECTION + 1ULL);
	EXPECT_EQ(-E2BIG, w.err);
	snap_writer__release(&w);
}

/* ---- archives (snapshot/archive.h) ------------------------------ */

/* base/NAME, in path. */
static void in_base(const struct snap_tmp *t, const char *name, char *path,
		    size_t len)
{
	snprintf(path, len, "%s/%s", t->base, name);
}

/* Bytes of file: its size, -1 if there is none. */
static off_t file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) ? -1 : st.st_size;
}

/*
 * The test snapshot of mem in t, packed into base/snap.kiln.zst (zst);
 * copy is where it unpacks, base/copy (each 160 bytes).
 */
static void packed_snapshot(struct __test_metadata *_metadata,
			    struct snap_tmp *t, const uint8_t *mem, char *zst,
			    char *copy)
{
	char err[1024] = "";

	ASSERT_TRUE(snap_tmp__make(t, "kiln-snap"));
	ASSERT_EQ(0, write_all(t, mem, err, sizeof(err))) TH_LOG("%s", err);
	in_base(t, "snap.kiln.zst", zst, 160);
	in_base(t, "copy", copy, 160);
	ASSERT_EQ(0, snap_archive__pack(t->dir, zst, SNAP_ARCHIVE_LEVEL, err,
					sizeof(err)))
	TH_LOG("%s", err);
}

/*
 * A snapshot packed and unpacked elsewhere: the copy verifies (modes,
 * manifest, every digest), its memory file keeps its holes, and the
 * archive is smaller than the data it holds.
 */
TEST(archive_round_trip_keeps_holes_and_digests)
{
	char err[1024] = "", zst[160], copy[160], path[200];
	uint8_t *mem = guest(), page[PAGE];
	json_t *m = NULL;
	struct stat st;
	struct snap_tmp t;
	int fd;

	ASSERT_NE(NULL, mem);
	packed_snapshot(_metadata, &t, mem, zst, copy);
	ASSERT_EQ(0, stat(zst, &st));
	EXPECT_EQ(0600, st.st_mode & 07777);
	EXPECT_GT((off_t)(4 * PAGE), st.st_size)
	TH_LOG("%lld bytes", (long long)st.st_size);
	ASSERT_EQ(0, snap_archive__unpack(zst, copy, err, sizeof(err)))
	TH_LOG("%s", err);
	ASSERT_EQ(0, snap_dir__verify(copy, &m, err, sizeof(err)))
	TH_LOG("%s", err);
	EXPECT_EQ(3, json_array_size(json_object_get(m, "parts")));
	EXPECT_STREQ("test", json_string_value(json_object_get(m, "vmm")));
	snprintf(path, sizeof(path), "%s/memory.raw", copy);
	fd = open(path, O_RDONLY);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, fstat(fd, &st));
	EXPECT_EQ((off_t)MEM_SIZE, st.st_size);
	EXPECT_GT(64 * PAGE, (uint64_t)st.st_blocks * 512)
	TH_LOG("%lld blocks", (long long)st.st_blocks);
	ASSERT_EQ((ssize_t)PAGE, pread(fd, page, PAGE, 6 * PAGE));
	EXPECT_EQ(0, memcmp(page, mem + 6 * PAGE, PAGE));
	close(fd);
	/* Neither end overwrites: the archive and the copy exist now. */
	EXPECT_EQ(-EEXIST, snap_archive__pack(t.dir, zst, SNAP_ARCHIVE_LEVEL,
					      err, sizeof(err)));
	EXPECT_EQ(-EEXIST, snap_archive__unpack(zst, copy, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "exists")) TH_LOG("%s", err);
	ASSERT_EQ(0, snap_dir__verify(copy, &m, err, sizeof(err)))
	TH_LOG("%s", err);
	json_decref(m);
	munmap(mem, MEM_SIZE);
	snap_tmp__clean(&t);
}

/* Only a snapshot that verifies, and whole, is packed; nothing is left. */
TEST(pack_refuses_what_is_not_a_whole_snapshot)
{
	char err[1024] = "", zst[160];
	uint8_t *mem = guest();
	struct snap_tmp t;

	ASSERT_NE(NULL, mem);
	ASSERT_TRUE(snap_tmp__make(&t, "kiln-snap"));
	in_base(&t, "snap.kiln.zst", zst, sizeof(zst));
	EXPECT_EQ(-ENOENT, snap_archive__pack(t.dir, zst, SNAP_ARCHIVE_LEVEL,
					      err, sizeof(err)));
	ASSERT_EQ(0, write_all(&t, mem, err, sizeof(err))) TH_LOG("%s", err);
	EXPECT_EQ(-EINVAL, snap_archive__pack(t.dir, zst, 0, err, sizeof(err)));
	damage(_metadata, t.dir, "a.state", 1, true);
	EXPECT_EQ(-EBADMSG, snap_archive__pack(t.dir, zst, SNAP_ARCHIVE_LEVEL,
					       err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "a.state: sha256")) TH_LOG("%s", err);
	EXPECT_EQ(-1, file_size(zst));
	munmap(mem, MEM_SIZE);
	snap_tmp__clean(&t);
}

/*
 * Damage to the archive itself: a flipped byte (zstd's checksum or its
 * decoding), cut short, bytes or a second frame after it. Each refused
 * by the unpacker, with nothing of the directory left.
 */
TEST(damaged_archives_leave_nothing)
{
	static const uint8_t junk[] = { 'x', 'y', 'z' };
	char err[1024] = "", zst[160], copy[160], cmd[400];
	uint8_t *mem = guest(), frame[64];
	size_t nframe;
	struct snap_tmp t;
	off_t size;
	int fd;

	ASSERT_NE(NULL, mem);
	packed_snapshot(_metadata, &t, mem, zst, copy);
	size = file_size(zst);
	ASSERT_LT(64, size);
	nframe = ZSTD_compress(frame, sizeof(frame), "", 0, 1);
	ASSERT_FALSE(ZSTD_isError(nframe));
	for (int i = 0; i < 5; i++) {
		char bad[200];

		snprintf(bad, sizeof(bad), "%s/bad%d.zst", t.base, i);
		snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", zst, bad);
		ASSERT_EQ(0, system(cmd));
		fd = open(bad, O_RDWR);
		ASSERT_LE(0, fd);
		if (i == 0 || i == 1) { /* a byte early, a byte at the end */
			off_t at = i ? size - 1 : size / 2;
			uint8_t b;

			ASSERT_EQ(1, pread(fd, &b, 1, at));
			b ^= 0x40;
			ASSERT_EQ(1, pwrite(fd, &b, 1, at));
		} else if (i == 2) {
			ASSERT_EQ(0, ftruncate(fd, size - 5));
		} else if (i == 3) {
			ASSERT_EQ((ssize_t)sizeof(junk),
				  pwrite(fd, junk, sizeof(junk), size));
		} else {
			ASSERT_EQ((ssize_t)nframe,
				  pwrite(fd, frame, nframe, size));
		}
		close(fd);
		err[0] = '\0';
		EXPECT_GT(0, snap_archive__unpack(bad, copy, err, sizeof(err)))
		TH_LOG("case %d unpacked", i);
		EXPECT_NE(NULL, strstr(err, bad)) TH_LOG("case %d: %s", i, err);
		EXPECT_EQ(-1, file_size(copy)) TH_LOG("case %d left it", i);
	}
	munmap(mem, MEM_SIZE);
	snap_tmp__clean(&t);
}

/* A hand-made archive: its stream, grown as it is written. */
struct raw {
	uint8_t buf[4096];
	size_t n;
};

static void raw_put(struct raw *r, const void *p, size_t n)
{
	if (r->n + n <= sizeof(r->buf))
		memcpy(r->buf + r->n, p, n);
	r->n += n;
}

static void raw_u16(struct raw *r, uint16_t v)
{
	v = htole16(v);
	raw_put(r, &v, sizeof(v));
}

static void raw_u64(struct raw *r, uint64_t v)
{
	v = htole64(v);
	raw_put(r, &v, sizeof(v));
}

/* A file of size bytes, one chunk of data at off (none if n is 0). */
static void raw_file(struct raw *r, const char *name, uint64_t size,
		     uint64_t off, const void *data, size_t n)
{
	raw_u16(r, (uint16_t)strlen(name));
	raw_put(r, name, strlen(name));
	raw_u64(r, size);
	if (n) {
		raw_u64(r, off);
		raw_u64(r, n);
		raw_put(r, data, n);
	}
	raw_u64(r, 0);
	raw_u64(r, 0);
}

/* "hello" as the part FILE: its manifest, sha256sum's digest. */
#define HELLO_SHA \
	"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
#define MANIFEST_OF(file)                                                        \
	"{\"format\": 1, \"parts\": [{\"file\": \"" file "\", \"kind\": "        \
	"\"vcpu\", \"bytes\": 5, \"digest\": \"file\", \"sha256\": \"" HELLO_SHA \
	"\"}]}"

/* A manifest of one part, its kind and size, and the VM's memoryBytes. */
#define MANIFEST_SIZED(kind, bytes, mem)                                    \
	"{\"format\": 1, \"memoryBytes\": " mem ", \"parts\": [{\"file\": " \
	"\"a\", \"kind\": \"" kind "\", \"bytes\": " bytes                  \
	", \"digest\": \"pages\", \"sha256\": \"" HELLO_SHA "\"}]}"

/* The archive case i writes into r (false: no more cases). */
static bool hostile(int i, struct raw *r, const char **why)
{
	static const char good[] = MANIFEST_OF("a");
	static const char dotdot[] = MANIFEST_OF("../a");
	static const char huge_state[] =
		MANIFEST_SIZED("vcpu", "1099511627776", "8192");
	static const char huge_memory[] = MANIFEST_SIZED(
		"memory", "1125899906842624", "1125899906842624");
	static const char memory_past[] =
		MANIFEST_SIZED("memory", "16384", "8192");
	const char *m = NULL;
	uint64_t size = 0;

	r->n = 0;
	if (i == 9) {
		raw_put(r, "KILNSNAQ\x01\0\0\0", 12);
		*why = "not a snapshot archive";
		return true;
	}
	raw_put(r, SNAP_ARCHIVE_MAGIC, 8);
	raw_put(r, "\x01\0\0\0", 4);
	switch (i) {
	case 0: /* the well-formed one the others spoil */
		*why = NULL;
		raw_file(r, SNAP_MANIFEST, strlen(good), 0, good, strlen(good));
		raw_file(r, "a", 5, 0, "hello", 5);
		break;
	case 1:
		*why = "first file is not";
		raw_file(r, "a", 5, 0, "hello", 5);
		break;
	case 2:
		*why = "no plain file name";
		raw_file(r, SNAP_MANIFEST, strlen(dotdot), 0, dotdot,
			 strlen(dotdot));
		raw_file(r, "../a", 5, 0, "hello", 5);
		break;
	case 3:
		*why = "does not name";
		raw_file(r, SNAP_MANIFEST, strlen(good), 0, good, strlen(good));
		raw_file(r, "b", 5, 0, "hello", 5);
		break;
	case 4:
		*why = "outside its";
		raw_file(r, SNAP_MANIFEST, strlen(good), 0, good, strlen(good));
		raw_file(r, "a", 5, 3, "hello", 5);
		break;
	case 5:
		*why = "twice";
		raw_file(r, SNAP_MANIFEST, strlen(good), 0, good, strlen(good));
		raw_file(r, "a", 5, 0, "hello", 5);
		raw_file(r, "a", 5, 0, "hello", 5);
		break;
	case 6:
		*why = "not in it";
		raw_file(r, SNAP_MANIFEST, strlen(good), 0, good, strlen(good));
		break;
	case 7:
		*why = "not the manifest's size";
		raw_file(r, SNAP_MANIFEST, strlen(good), 0, good, strlen(good));
		raw_file(r, "a", 1ULL << 40, 0, "hello", 5);
		break;
	case 8: /* a digest that does not match: caught by the verify */
		*why = "sha256";
		raw_file(r, SNAP_MANIFEST, strlen(good), 0, good, strlen(good));
		raw_file(r, "a", 5, 0, "hellO", 5);
		break;
	case 10: /* 1 TiB of state, a hole but for 5 bytes */
		*why = "a: 1099511627776 bytes, not within its bound of "
		       "67108864 (SNAP_PART_MAX)";
		m = huge_state;
		size = 1ULL << 40;
		break;
	case 11: /* 1 PiB of RAM, as the manifest says */
		*why = "a: 1125899906842624 bytes, not within its bound of 0 "
		       "(the manifest's memoryBytes)";
		m = huge_memory;
		size = 1ULL << 50;
		break;
	case 12: /* memory larger than the VM's */
		*why = "a: 16384 bytes, not within its bound of 8192 (the "
		       "manifest's memoryBytes)";
		m = memory_past;
		size = 16384;
		break;
	default:
		return false;
	}
	if (m) {
		raw_file(r, SNAP_MANIFEST, strlen(m), 0, m, strlen(m));
		raw_file(r, "a", size, 0, "hello", 5);
	}
	raw_u16(r, 0);
	return true;
}

/*
 * Archives made by hand, as a hostile sender would: the well-formed one
 * unpacks and verifies (so the others are spoilt in one way only); a
 * wrong magic, a first file that is not the manifest, a name with '/',
 * a file the manifest does not name, a chunk outside its file, a file
 * twice or missing, a size not the manifest's, a wrong digest: each
 * refused, saying why, with nothing left, inside the directory or out.
 */
TEST(hostile_archives_are_refused)
{
	char err[1024], zst[160], copy[160], outside[160];
	uint8_t packed[8192];
	const char *why;
	struct snap_tmp t;
	struct raw r;
	size_t n;
	int fd;

	ASSERT_TRUE(snap_tmp__make(&t, "kiln-snap"));
	in_base(&t, "a", outside, sizeof(outside));
	for (int i = 0; hostile(i, &r, &why); i++) {
		ASSERT_GE(sizeof(r.buf), r.n);
		n = ZSTD_compress(packed, sizeof(packed), r.buf, r.n, 3);
		ASSERT_FALSE(ZSTD_isError(n));
		snprintf(zst, sizeof(zst), "%s/case%d.zst", t.base, i);
		snprintf(copy, sizeof(copy), "%s/copy%d", t.base, i);
		fd = open(zst, O_WRONLY | O_CREAT | O_EXCL, 0600);
		ASSERT_LE(0, fd);
		ASSERT_EQ((ssize_t)n, write(fd, packed, n));
		close(fd);
		err[0] = '\0';
		if (!why) {
			EXPECT_EQ(0, snap_archive__unpack(zst, copy, err,
							  sizeof(err)))
			TH_LOG("%s", err);
			EXPECT_EQ(5, file_size(strcat(copy, "/a")));
			continue;
		}
		EXPECT_GT(0, snap_archive__unpack(zst, copy, err, sizeof(err)))
		TH_LOG("case %d unpacked", i);
		EXPECT_NE(NULL, strstr(err, why))
		TH_LOG("case %d: want \"%s\" in: %s", i, why, err);
		EXPECT_EQ(-1, file_size(copy)) TH_LOG("case %d left it", i);
		EXPECT_EQ(-1, file_size(outside))
		TH_LOG("case %d wrote out", i);
	}
	snap_tmp__clean(&t);
}

/*
 * A small archive whose data would be far larger than it (64 MiB of one
 * byte, which zstd packs into a few KiB): refused past
 * SNAP_ARCHIVE_RATIO_MAX times its size, naming the file; nothing left.
 */
TEST(archive_data_bounded_by_its_size)
{
	static const char man[] =
		MANIFEST_SIZED("memory", "67108864", "67108864");
	const size_t data = 64U << 20, cap = data + 4096;
	char err[1024] = "", zst[160], copy[160];
	uint8_t *raw = malloc(cap), *packed = malloc(cap);
	struct snap_tmp t;
	size_t n = 0, z;
	uint64_t v;
	uint16_t l;
	int fd;

	ASSERT_TRUE(raw && packed);
	ASSERT_TRUE(snap_tmp__make(&t, "kiln-snap"));
#define PUT(p, k) (memcpy(raw + n, (p), (k)), n += (k))
	PUT(SNAP_ARCHIVE_MAGIC "\x01\0\0\0", 12);
	l = htole16(strlen(SNAP_MANIFEST));
	PUT(&l, 2);
	PUT(SNAP_MANIFEST, strlen(SNAP_MANIFEST));
	v = htole64(strlen(man));
	PUT(&v, 8);
	v = 0;
	PUT(&v, 8);
	v = htole64(strlen(man));
	PUT(&v, 8);
	PUT(man, strlen(man));
	v = 0;
	PUT(&v, 8);
	PUT(&v, 8);
	l = htole16(1);
	PUT(&l, 2);
	PUT("a", 1);
	v = htole64(data);
	PUT(&v, 8);
	v = 0;
	PUT(&v, 8);
	v = htole64(data);
	PUT(&v, 8);
	memset(raw + n, 1, data);
	n += data;
	v = 0;
	PUT(&v, 8);
	PUT(&v, 8);
	l = 0;
	PUT(&l, 2);
#undef PUT
	z = ZSTD_compress(packed, cap, raw, n, 3);
	ASSERT_FALSE(ZSTD_isError(z));
	ASSERT_GT(data / SNAP_ARCHIVE_RATIO_MAX, z);
	snprintf(zst, sizeof(zst), "%s/ratio.zst", t.base);
	snprintf(copy, sizeof(copy), "%s/ratio", t.base);
	fd = open(zst, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ASSERT_LE(0, fd);
	ASSERT_EQ((ssize_t)z, write(fd, packed, z));
	close(fd);
	EXPECT_EQ(-EFBIG, snap_archive__unpack(zst, copy, err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "a: more data than 4096 times"))
	TH_LOG("%s", err);
	EXPECT_NE(NULL, strstr(err, "SNAP_ARCHIVE_RATIO_MAX"))
	TH_LOG("%s", err);
	EXPECT_EQ(-1, file_size(copy));
	free(raw);
	free(packed);
	snap_tmp__clean(&t);
}

/* A snapshot whose root is a persistent root's state file stays home. */
TEST(pack_refuses_a_snapshot_that_is_not_whole)
{
	char err[1024] = "", zst[160];
	json_t *fields = json_pack("{s:{s:s}}", SNAP_ROOT_STATE, "path",
				   "/var/lib/state");
	struct snap_dir d;
	struct snap_tmp t;

	ASSERT_NE(NULL, fields);
	ASSERT_TRUE(snap_tmp__make(&t, "kiln-snap"));
	ASSERT_EQ(0, snap_dir__create(&d, t.dir, err, sizeof(err)));
	ASSERT_EQ(0, snap_dir__write_part(&d, "a.state", "vcpu", "hello", 5,
					  err, sizeof(err)));
	ASSERT_EQ(0, snap_dir__finish(&d, fields, err, sizeof(err)));
	snap_dir__close(&d);
	in_base(&t, "snap.kiln.zst", zst, sizeof(zst));
	EXPECT_EQ(-EXDEV, snap_archive__pack(t.dir, zst, SNAP_ARCHIVE_LEVEL,
					     err, sizeof(err)));
	EXPECT_NE(NULL, strstr(err, "persistent root")) TH_LOG("%s", err);
	EXPECT_EQ(-1, file_size(zst));
	json_decref(fields);
	snap_tmp__clean(&t);
}

TEST_HARNESS_MAIN
