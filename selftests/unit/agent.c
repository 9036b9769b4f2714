// SPDX-License-Identifier: GPL-2.0
/*
 * The guest agent (guest/agent/) without a VM: each test starts
 * kiln-agent-host on a Unix socket in a fresh directory under /tmp and
 * speaks the protocol to it (Documentation/agent-protocol.md). Processes:
 * pipes and pty, stdin, exit codes, signals, the timeout and the group
 * kill, a host that goes away. Files: every operation with its error
 * cases, ranges, 64 MiB each way in little memory. Facts, 50 commands at
 * once, malformed input. KILN_AGENT_HOST names the binary (default:
 * guest/kiln-agent-host in the build directory this test was built in).
 */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pwd.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "proto/mounts.h"
#include "proto/reseed.h"
#include "selftests/agent_client.h"
#include "selftests/kselftest.h"
#include "selftests/testutil.h"

#define ARGV(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define MiB	  (1024 * 1024)
/* The most a connection's process may use, peak, for 64 MiB either way. */
#define RSS_LIMIT_KIB (16 * 1024)

FIXTURE(agent)
{
	pid_t pid;
	char dir[64];
	char sock[96];
	char work[96]; /* scratch directory for the file tests */
	struct agent_msg m;
};

/* build/selftests/agent -> build/guest/kiln-agent-host */
static void agent_host_path(char *out, size_t size)
{
	const char *env = getenv("KILN_AGENT_HOST");
	char self[PATH_MAX];
	ssize_t n;
	char *s;

	if (env) {
		snprintf(out, size, "%s", env);
		return;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	for (int i = 0; i < 2; i++) {
		s = strrchr(self, '/');
		if (s)
			*s = '\0';
	}
	if (snprintf(out, size, "%s/guest/kiln-agent-host", self) >= (int)size)
		out[0] = '\0';
}

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/*
 * kiln-agent-host on self->sock, listening once this returns; with
 * default_cwd, given it as the boot's --cwd (init's default_cwd).
 */
static void start_agent(struct __test_metadata *_metadata,
			FIXTURE_DATA(agent) * self, const char *default_cwd)
{
	char bin[PATH_MAX];
	int fd = -1;

	agent_host_path(bin, sizeof(bin));
	ASSERT_EQ(0, access(bin, X_OK))
	TH_LOG("%s: %s (make selftests builds it)", bin, strerror(errno));
	self->pid = fork();
	ASSERT_LE(0, self->pid);
	if (self->pid == 0) {
		if (default_cwd)
			execl(bin, "kiln-agent-host", "--unix", self->sock,
			      "--die-with-parent", "--cwd", default_cwd, NULL);
		else
			execl(bin, "kiln-agent-host", "--unix", self->sock,
			      "--die-with-parent", NULL);
		_exit(127);
	}
	for (int i = 0; i < 500 && fd < 0; i++) {
		fd = agent_client__connect_unix(self->sock);
		if (fd < 0)
			usleep(10 * 1000);
	}
	ASSERT_LE(0, fd) TH_LOG("the agent does not listen on %s", self->sock);
	close(fd);
}

/*
 * The socket's name goes with the agent: a connection child it forked
 * holds the listener until it closes its copy, and a connect() to the
 * name meanwhile would queue behind a listener nobody accepts on (reset
 * once the child closes it), not reach the next agent.
 */
static void stop_agent(FIXTURE_DATA(agent) * self)
{
	if (self->pid > 0) {
		kill(self->pid, SIGTERM);
		waitpid(self->pid, NULL, 0);
		unlink(self->sock);
	}
	self->pid = 0;
}

FIXTURE_SETUP(agent)
{
	ASSERT_EQ(0, agent_msg__init(&self->m));
	strcpy(self->dir, "/tmp/kiln-agent-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(self->dir));
	snprintf(self->sock, sizeof(self->sock), "%s/sock", self->dir);
	snprintf(self->work, sizeof(self->work), "%s/w", self->dir);
	ASSERT_EQ(0, mkdir(self->work, 0755));
	/* The agent's environment, which commands inherit without T_ENV. */
	setenv("KILN_AGENT_TEST_MARK", "inherited", 1);
	start_agent(_metadata, self, NULL);
}

FIXTURE_TEARDOWN(agent)
{
	char mnt[PATH_MAX];

	/* fs_remove_stays_on_its_file_system's mount, should it be left. */
	snprintf(mnt, sizeof(mnt), "%s/t/m", self->work);
	umount2(mnt, MNT_DETACH);
	stop_agent(self);
	if (self->dir[0])
		nftw(self->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	agent_msg__free(&self->m);
}

/* ---- helpers -------------------------------------------------------- */

static int agent_connect(struct __test_metadata *_metadata,
			 FIXTURE_DATA(agent) * self)
{
	int fd = agent_client__connect_unix(self->sock);

	ASSERT_LE(0, fd) TH_LOG("connect: %s", strerror(-fd));
	ASSERT_EQ(0, agent_client__hello(fd));
	return fd;
}

static void run(struct __test_metadata *_metadata, FIXTURE_DATA(agent) * self,
		const struct agent_exec_opts *o, struct agent_exec_result *r)
{
	int fd = agent_connect(_metadata, self);
	int ret = agent_client__exec(fd, o, r);

	close(fd);
	ASSERT_EQ(0, ret) TH_LOG("exec: %s", strerror(-ret));
}

/*
 * A path in the scratch directory, in a ring of buffers: good for a few
 * calls at once; copy one that must live longer.
 */
static const char *wpath(FIXTURE_DATA(agent) * self, const char *rel)
{
	static char ring[16][PATH_MAX];
	static int next;
	char *p = ring[next++ % 16];

	snprintf(p, PATH_MAX, "%s/%s", self->work, rel);
	return p;
}

static void write_file(const char *path, const void *p, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0 || write(fd, p, len) != (ssize_t)len)
		abort();
	close(fd);
}

/* NUL-terminated contents, or NULL; free() it. */
static char *read_file(const char *path, size_t *len)
{
	struct stat st;
	char *buf;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) || !(buf = malloc(st.st_size + 1))) {
		close(fd);
		return NULL;
	}
	*len = read(fd, buf, st.st_size);
	buf[*len] = '\0';
	close(fd);
	return buf;
}

/* Gone, or a zombie, now. */
static bool pid_gone(pid_t pid)
{
	char path[64], buf[512], *s;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	s = strrchr(buf, ')');
	return s && (s[2] == 'Z' || s[2] == 'X');
}

/*
 * Waits until pid is gone, however long the machine takes: one that is
 * never killed hangs the test until its timeout, which fails it.
 */
static bool wait_gone(pid_t pid)
{
	while (!pid_gone(pid))
		usleep(10 * 1000);
	return true;
}

/* A shell command that runs until this test process ends. */
static const char *forever(struct __test_metadata *_metadata,
			   FIXTURE_DATA(agent) * self)
{
	static char cmd[PATH_MAX + 8];
	char path[PATH_MAX];

	ASSERT_EQ(0, forever_fifo(self->dir, path, sizeof(path)));
	snprintf(cmd, sizeof(cmd), "cat %s", path);
	return cmd;
}

/* The fields of a file request; what is not "has" is left out. */
struct fs_args {
	const char *path, *path2;
	uint64_t offset, length, mode;
	bool has_offset, has_length, has_mode;
	bool recursive, force, parents;
};

static void build_fs(struct kiln_buf *b, const struct fs_args *a)
{
	kiln_buf__init(b);
	if (a->path)
		kiln_tlv__put_str(b, KILN_T_PATH, a->path);
	if (a->path2)
		kiln_tlv__put_str(b, KILN_T_PATH2, a->path2);
	if (a->has_offset)
		kiln_tlv__put_u64(b, KILN_T_OFFSET, a->offset);
	if (a->has_length)
		kiln_tlv__put_u64(b, KILN_T_LENGTH, a->length);
	if (a->has_mode)
		kiln_tlv__put_u64(b, KILN_T_MODE, a->mode);
	if (a->recursive)
		kiln_tlv__put_u64(b, KILN_T_RECURSIVE, 1);
	if (a->force)
		kiln_tlv__put_u64(b, KILN_T_FORCE, 1);
	if (a->parents)
		kiln_tlv__put_u64(b, KILN_T_CREATE_PARENTS, 1);
}

/* 0 for RESULT (in self->m), else the ERROR's errno, name checked. */
static int answer(struct __test_metadata *_metadata, FIXTURE_DATA(agent) * self)
{
	char name[32] = "";
	uint64_t e = 0;

	if (self->m.type == KILN_MSG_RESULT)
		return 0;
	ASSERT_EQ(KILN_MSG_ERROR, self->m.type);
	ASSERT_TRUE(agent_msg__u64(&self->m, KILN_T_ERRNO, &e));
	ASSERT_TRUE(
		agent_msg__str(&self->m, KILN_T_ERRNAME, name, sizeof(name)));
	EXPECT_STREQ(kiln_errno__name(e), name);
	return e;
}

/* One request and its one answer, on a connection of its own. */
static int fs_op(struct __test_metadata *_metadata, FIXTURE_DATA(agent) * self,
		 uint16_t type, const struct fs_args *a)
{
	struct kiln_buf b;
	int fd;

	fd = agent_connect(_metadata, self);
	build_fs(&b, a);
	ASSERT_EQ(0, agent_client__send_buf(fd, type, &b));
	kiln_buf__free(&b);
	ASSERT_EQ(0, agent_client__recv(fd, &self->m));
	close(fd);
	return answer(_metadata, self);
}

#define FS(type, ...)                              \
	fs_op(_metadata, self, KILN_MSG_FS_##type, \
	      &(struct fs_args){ __VA_ARGS__ })

static uint64_t result_u64(struct __test_metadata *_metadata,
			   FIXTURE_DATA(agent) * self, uint16_t tag)
{
	uint64_t v = 0;

	ASSERT_TRUE(agent_msg__u64(&self->m, tag, &v)) TH_LOG("tag %u", tag);
	return v;
}

/*
 * FS_READ into a malloc'ed buffer (NUL-terminated): 0 or the errno.
 * Checks the frames: FS_DATA of at most KILN_DATA_CHUNK, then RESULT
 * with T_SIZE matching.
 */
static int fs_read(struct __test_metadata *_metadata,
		   FIXTURE_DATA(agent) * self, const struct fs_args *a,
		   char **out, size_t *len)
{
	struct kiln_buf b;
	int fd, err;

	*out = calloc(1, 1);
	*len = 0;
	fd = agent_connect(_metadata, self);
	build_fs(&b, a);
	ASSERT_EQ(0, agent_client__send_buf(fd, KILN_MSG_FS_READ, &b));
	kiln_buf__free(&b);
	for (;;) {
		ASSERT_EQ(0, agent_client__recv(fd, &self->m));
		if (self->m.type != KILN_MSG_FS_DATA)
			break;
		ASSERT_GE(KILN_DATA_CHUNK, self->m.len);
		*out = realloc(*out, *len + self->m.len + 1);
		memcpy(*out + *len, self->m.data, self->m.len);
		*len += self->m.len;
		(*out)[*len] = '\0';
	}
	close(fd);
	err = answer(_metadata, self);
	if (!err)
		EXPECT_EQ(*len, result_u64(_metadata, self, KILN_T_SIZE));
	return err;
}

/* FS_WRITE with @len bytes in frames of @chunk: 0 or the errno. */
static int fs_write(struct __test_metadata *_metadata,
		    FIXTURE_DATA(agent) * self, const struct fs_args *a,
		    const void *data, size_t len, size_t chunk)
{
	const uint8_t *p = data;
	struct kiln_buf b;
	size_t n;
	int fd, err;

	fd = agent_connect(_metadata, self);
	build_fs(&b, a);
	ASSERT_EQ(0, agent_client__send_buf(fd, KILN_MSG_FS_WRITE, &b));
	kiln_buf__free(&b);
	do {
		n = len < chunk ? len : chunk;
		ASSERT_EQ(0,
			  agent_client__send(fd, KILN_MSG_FS_DATA,
					     n == len ? KILN_F_EOF : 0, p, n));
		p += n;
		len -= n;
	} while (len);
	ASSERT_EQ(0, agent_client__recv(fd, &self->m));
	close(fd);
	err = answer(_metadata, self);
	return err;
}

/* ---- hello and processes ---------------------------------------------- */

TEST_F(agent, hello)
{
	struct agent_msg m;
	uint64_t v;
	int fd;

	fd = agent_client__connect_unix(self->sock);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, agent_msg__init(&m));
	ASSERT_EQ(0, agent_client__recv(fd, &m));
	EXPECT_EQ(KILN_MSG_HELLO, m.type);
	EXPECT_TRUE(agent_msg__u64(&m, KILN_T_VERSION, &v));
	EXPECT_EQ(1, v);
	EXPECT_TRUE(agent_msg__u64(&m, KILN_T_FEATURES, &v));
	EXPECT_EQ(KILN_FEATURE_RESEED | KILN_FEATURE_MOUNTS |
			  KILN_FEATURE_NET_RENEW | KILN_FEATURE_ENV_MERGE |
			  KILN_FEATURE_USER | KILN_FEATURE_CONTAINER |
			  KILN_FEATURE_CONFINE,
		  v);
	agent_msg__free(&m);
	close(fd);
}

TEST_F(agent, exec_stdout_stderr_exit_code)
{
	struct agent_exec_result r;

	run(_metadata, self,
	    &(struct agent_exec_opts){
		    .argv = ARGV("sh", "-c",
				 "echo out; echo err >&2; exit 3") },
	    &r);
	EXPECT_EQ(0, r.error);
	EXPECT_STREQ("out\n", (char *)r.out);
	EXPECT_STREQ("err\n", (char *)r.err);
	EXPECT_EQ(3, r.exit_code);
	EXPECT_EQ(-1, r.signal);
	EXPECT_FALSE(r.timed_out);
	EXPECT_LT(0, r.pid);
	agent_exec_result__free(&r);
}

TEST_F(agent, exec_stdin_reaches_the_command)
{
	static const char in[] = "hello\nworld";
	struct agent_exec_result r;

	run(_metadata, self,
	    &(struct agent_exec_opts){
		    .argv = ARGV("cat"), .in = in, .in_len = strlen(in) },
	    &r);
	EXPECT_EQ(0, r.error);
	EXPECT_STREQ(in, (char *)r.out);
	EXPECT_EQ(0, r.exit_code);
	agent_exec_result__free(&r);
}

/* 8 MiB through cat: stdin and stdout stream at once, nothing stalls. */
TEST_F(agent, exec_stdin_streams_both_ways)
{
	size_t len = 8 * MiB, i;
	struct agent_exec_result r;
	uint8_t *in = malloc(len);

	ASSERT_NE(NULL, in);
	for (i = 0; i < len; i++)
		in[i] = (uint8_t)(i * 7 + (i >> 12));
	run(_metadata, self,
	    &(struct agent_exec_opts){
		    .argv = ARGV("cat"), .in = in, .in_len = len },
	    &r);
	EXPECT_EQ(0, r.error);
	EXPECT_EQ(0, r.exit_code);
	ASSERT_EQ(len, r.out_len);
	EXPECT_EQ(0, memcmp(in, r.out, len));
	agent_exec_result__free(&r);
	free(in);
}

TEST_F(agent, exec_environment)
{
	struct agent_exec_result r;

	/* No T_ENV: the agent's own environment (PATH, and our mark). */
	run(_metadata, self,
	    &(struct agent_exec_opts){
		    .argv = ARGV(
			    "sh", "-c",
			    "echo \"$KILN_AGENT_TEST_MARK ${PATH:+path}\"") },
	    &r);
	EXPECT_STREQ("inherited path\n", (char *)r.out);
	agent_exec_result__free(&r);

	/* T_ENV: exactly those; sh is still found (the agent's PATH). */
	run(_metadata, self,
	    &(struct agent_exec_opts){
		    .argv = ARGV("sh", "-c",
				 "echo \"$FOO ${KILN_AGENT_TEST_MARK-unset} "
				 "${HOME-nohome}\""),
		    .envp = ARGV("FOO=bar baz") },
	    &r);
	EXPECT_EQ(0, r.error);
	EXPECT_STREQ("bar baz unset nohome\n", (char *)r.out);
	agent_exec_result__free(&r);
}

/*
 * T_ENV_MERGE 1: the entries add to the agent's own environment (its
 * PATH and our mark stay; a name given replaces the agent's, once).
 */
TEST_F(agent, exec_environment_merge)
{
	struct agent_exec_result r;

	run(_metadata, self,
	    &(struct agent_exec_opts){
		    .argv = ARGV("sh", "-c",
				 "echo \"$FOO|$KILN_AGENT_TEST_MARK|"
				 "$(env | grep -c '^KILN_AGENT_TEST_MARK=')|"
				 "$(env | grep -c '^PATH=')\""),
		    .envp = ARGV("FOO=bar baz",
				 "KILN_AGENT_TEST_MARK=replaced"),
		    .env_merge = 1 },
	    &r);
	EXPECT_EQ(0, r.error) TH_LOG("%s", r.message);
	EXPECT_STREQ("bar baz|replaced|1|1\n", (char *)r.out);
	agent_exec_result__free(&r);

	/* T_ENV_MERGE alone: the agent's own, as without it. */
	run(_metadata, self,
	    &(struct agent_exec_opts){
		    .argv = ARGV("sh", "-c", "echo $KILN_AGENT_TEST_MARK"),
		    .env_merge = 1 },
	    &r);
	EXPECT_STREQ("inherited\n", (char *)r.out);
	agent_exec_result__free(&r);
}

/* A bad entry (a host that bypassed the vmm) is refused by name. */
TEST_F(agent, exec_environment_bad_entries)
{
	static const struct {
		const char *entry;
		size_t len;
		const char *message;
	} cases[] = {
		{ "NOEQUALS", 8,
		  "environment variable \"NOEQUALS\": no '=' (expected "
		  "NAME=value)" },
		{ "=x", 2, "environment variable \"\": an empty name" },
		{ "A\0B=1", 5, "environment variable \"A?B\": a NUL byte" },
		{ "CI=1\0", 5, "environment variable \"CI\": a NUL byte" },
	};
	struct agent_exec_result r;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		for (uint64_t merge = 0; merge < 2; merge++) {
			run(_metadata, self,
			    &(struct agent_exec_opts){
				    .argv = ARGV("true"),
				    .raw_env = cases[i].entry,
				    .raw_env_len = cases[i].len,
				    .env_merge = merge },
			    &r);
			EXPECT_EQ(EINVAL, r.error);
			EXPECT_STREQ(cases[i].message, r.message);
			agent_exec_result__free(&r);
		}
	}
	/* T_ENV_MERGE is 0 or 1. */
	run(_metadata, self,
	    &(struct agent_exec_opts){ .argv = ARGV("true"),
				       .envp = ARGV("CI=1"),
				       .env_merge = 2 },
	    &r);
	EXPECT_EQ(EINVAL, r.error);
	EXPECT_STREQ("malformed T_ENV_MERGE", r.message);
	agent_exec_result__free(&r);
}

TEST_F(agent, exec_cwd)
{
	struct agent_exec_result r;

	run(_metadata, self,
	    &(struct agent_exec_opts){ .argv = ARGV("pwd"), .cwd = self->work },
	    &r);
	EXPECT_EQ(0, r.error);
	ASSERT_LT(0, r.out_len);
	r.out[r.out_len - 1] = '\0';
	EXPECT_STREQ(self->work, (char *)r.out);
	agent_exec_result__free(&r);
}

/*
 * The boot's --cwd (init's default_cwd): where a request without T_CWD
 * runs; T_CWD still wins; a default that is gone fails the request as a
 * bad T_CWD does.
 */
TEST_F(agent, exec_default_cwd)
{
	const char *missing = wpath(self, "gone");
	struct agent_exec_result r;

	stop_agent(self);
	start_agent(_metadata, self, self->work);
	run(_metadata, self, &(struct agent_exec_opts){ .argv = ARGV("pwd") },
	    &r);
	EXPECT_EQ(0, r.error);
	ASSERT_LT(0, r.out_len);
	r.out[r.out_len - 1] = '\0';
	EXPECT_STREQ(self->work, (char *)r.out);
	agent_exec_result__free(&r);

	run(_metadata, self,
	    &(struct agent_exec_opts){ .argv = ARGV("pwd"), .cwd = "/" }, &r);
	EXPECT_EQ(0, r.error);
	EXPECT_STREQ("/\n", (char *)r.out);
	agent_exec_result__free(&r);

	stop_agent(self);
	start_agent(_metadata, self, missing);
	run(_metadata, self, &(struct agent_exec_opts){ .argv = ARGV("true") },
	    &r);
	EXPECT_EQ(ENOENT, r.error);
	agent_exec_result__free(&r);
}

TEST_F(agent, exec_errors_before_exec)
{
	const char *script = wpath(self, "script");
	struct agent_exec_result r;

	run(_metadata, self,
	    &(struct agent_exec_opts){ .argv = ARGV("kiln-no-such-command"),
				       /* a PATH every user may search */
				       .envp = ARGV("PATH=/usr/bin:/bin") },
	    &r);
	EXPECT_EQ(ENOENT, r.error);
	EXPECT_STREQ("ENOENT", r.errname);
	/* A missing command, not a missing directory: no T_CWD. */
	EXPECT_STREQ("", r.err_cwd);
	agent_exec_result__free(&r);

	/* Not executable (root too needs an x bit). */
	write_file(script, "#!/bin/sh\necho hi\n", 18);
	chmod(script, 0644);
	run(_metadata, self, &(struct agent_exec_opts){ .argv = ARGV(script) },
	    &r);
	EXPECT_EQ(EACCES, r.error);
	EXPECT_STREQ("EACCES", r.errname);
	EXPECT_STREQ("", r.err_cwd);
	agent_exec_result__free(&r);

	/*
	 * The working directory: the same ENOENT as a missing command, so
	 * the ERROR names the directory in T_CWD (vmmctl's exit 200).
	 */
	run(_metadata, self,
	    &(struct agent_exec_opts){ .argv = ARGV("true"),
				       .cwd = wpath(self, "missing") },
	    &r);
	EXPECT_EQ(ENOENT, r.error);
	EXPECT_STREQ(wpath(self, "missing"), r.err_cwd);
	agent_exec_result__free(&r);

	run(_metadata, self,
	    &(struct agent_exec_opts){ .argv = ARGV("true"), .cwd = script },
	    &r);
	EXPECT_EQ(ENOTDIR, r.error);
	EXPECT_STREQ("ENOTDIR", r.errname);
	EXPECT_STREQ(script, r.err_cwd);
	agent_exec_result__free(&r);

	/* No T_ARG at all: a malformed request. */
	run(_metadata, self, &(struct agent_exec_opts){ .argv = NULL }, &r);
	EXPECT_EQ(EPROTO, r.error);
	agent_exec_result__free(&r);
}

TEST_F(agent, exec_killed_by_a_signal)
{
	struct agent_exec_result r;

	run(_metadata, self,
	    &(struct agent_exec_opts){ .argv = ARGV("sh", "-c", "kill -9 $$") },
	    &r);
	EXPECT_EQ(0, r.error);
	EXPECT_EQ(137, r.exit_code);
	EXPECT_EQ(9, r.signal);
	EXPECT_FALSE(r.timed_out);
	agent_exec_result__free(&r);
}

/*
 * The timeout kills the group, the grandchild too: 124. The command runs
 * for ever otherwise, so only the timeout can end it.
 */
TEST_F(agent, exec_timeout_kills_the_group)
{
	struct agent_exec_result r;
	char script[2 * PATH_MAX + 32];
	const char *cmd = forever(_metadata, self);
	pid_t grandchild;

	snprintf(script, sizeof(script), "%s & echo $!; %s", cmd, cmd);
	run(_metadata, self,
	    &(struct agent_exec_opts){ .argv = ARGV("sh", "-c", script),
				       .timeout_ms = 300 },
	    &r);
	EXPECT_EQ(0, r.error);
	EXPECT_EQ(124, r.exit_code);
	EXPECT_TRUE(r.timed_out);
	EXPECT_EQ(SIGKILL, r.signal);
	grandchild = atoi((char *)r.out);
	ASSERT_LT(0, grandchild) TH_LOG("stdout: %s", r.out);
	EXPECT_TRUE(wait_gone(grandchild));
	EXPECT_TRUE(wait_gone(r.pid));
	agent_exec_result__free(&r);
}

/* Reads frames up to PROC_STARTED and one whole line of stdout. */
static void started_with_line(struct __test_metadata *_metadata,
			      FIXTURE_DATA(agent) * self, int fd, uint64_t *pid,
			      char *line, size_t size)
{
	size_t n = 0;

	*pid = 0;
	line[0] = '\0';
	while (!*pid || !strchr(line, '\n')) {
		ASSERT_EQ(0, agent_client__recv(fd, &self->m));
		if (self->m.type == KILN_MSG_PROC_STARTED) {
			ASSERT_TRUE(agent_msg__u64(&self->m, KILN_T_PID, pid));
		} else {
			ASSERT_EQ(KILN_MSG_PROC_STDOUT, self->m.type);
			ASSERT_GT(size, n + self->m.len);
			memcpy(line + n, self->m.data, self->m.len);
			n += self->m.len;
			line[n] = '\0';
		}
	}
}

TEST_F(agent, exec_signal_reaches_the_group)
{
	struct agent_exec_opts o = {
		.argv = ARGV("sh", "-c", "sleep 100 & echo $!; wait"),
		.keep_stdin_open = true,
	};
	struct agent_exec_result r;
	char line[64];
	struct kiln_buf b;
	uint64_t pid;
	int fd;

	fd = agent_connect(_metadata, self);
	ASSERT_EQ(0, agent_client__start(fd, &o));
	started_with_line(_metadata, self, fd, &pid, line, sizeof(line));
	kiln_buf__init(&b);
	kiln_tlv__put_u64(&b, KILN_T_SIGNAL, SIGTERM);
	ASSERT_EQ(0, agent_client__send_buf(fd, KILN_MSG_PROC_SIGNAL, &b));
	kiln_buf__free(&b);
	ASSERT_EQ(0, agent_exec_result__init(&r));
	ASSERT_EQ(0, agent_client__finish(fd, &o, &r));
	close(fd);
	EXPECT_EQ(0, r.error);
	EXPECT_EQ(128 + SIGTERM, r.exit_code);
	EXPECT_EQ(SIGTERM, r.signal);
	EXPECT_FALSE(r.timed_out);
	/* The background sleep got it too: same group. */
	EXPECT_TRUE(wait_gone(atoi(line)));
	agent_exec_result__free(&r);
}

TEST_F(agent, exec_bad_signal_is_an_error)
{
	struct agent_exec_opts o = { .argv = ARGV("sleep", "100"),
				     .keep_stdin_open = true };
	struct agent_exec_result r;
	struct kiln_buf b;
	int fd;

	fd = agent_connect(_metadata, self);
	ASSERT_EQ(0, agent_client__start(fd, &o));
	kiln_buf__init(&b);
	kiln_tlv__put_u64(&b, KILN_T_SIGNAL, 1000);
	ASSERT_EQ(0, agent_client__send_buf(fd, KILN_MSG_PROC_SIGNAL, &b));
	kiln_buf__free(&b);
	ASSERT_EQ(0, agent_exec_result__init(&r));
	ASSERT_EQ(0, agent_client__finish(fd, &o, &r));
	EXPECT_EQ(EINVAL, r.error);
	/* The connection ends with the ERROR, and the command with it. */
	EXPECT_EQ(-ECONNRESET, agent_client__recv(fd, &self->m));
	close(fd);
	EXPECT_TRUE(wait_gone(r.pid));
	agent_exec_result__free(&r);
}

/*
 * A command that does not read stdin: the pipe takes one frame, the agent
 * holds the next, and a signal behind them still gets through.
 */
TEST_F(agent, exec_signal_while_stdin_waits)
{
	struct agent_exec_opts o = { .argv = ARGV("sleep", "100"),
				     .keep_stdin_open = true };
	struct agent_exec_result r;
	struct kiln_buf b;
	uint8_t *data;
	int fd;

	data = calloc(1, KILN_DATA_CHUNK);
	ASSERT_NE(NULL, data);
	fd = agent_connect(_metadata, self);
	ASSERT_EQ(0, agent_client__start(fd, &o));
	for (int i = 0; i < 2; i++)
		ASSERT_EQ(0, agent_client__send(fd, KILN_MSG_PROC_STDIN, 0,
						data, KILN_DATA_CHUNK));
	kiln_buf__init(&b);
	kiln_tlv__put_u64(&b, KILN_T_SIGNAL, SIGINT);
	ASSERT_EQ(0, agent_client__send_buf(fd, KILN_MSG_PROC_SIGNAL, &b));
	kiln_buf__free(&b);
	ASSERT_EQ(0, agent_exec_result__init(&r));
	ASSERT_EQ(0, agent_client__finish(fd, &o, &r));
	close(fd);
	EXPECT_EQ(0, r.error);
	EXPECT_EQ(128 + SIGINT, r.exit_code);
	EXPECT_EQ(SIGINT, r.signal);
	agent_exec_result__free(&r);
	free(data);
}

/* The host goes away mid-command: the whole group is killed. */
TEST_F(agent, exec_abort_kills_the_group)
{
	struct agent_exec_opts o = {
		.argv = ARGV("sh", "-c", "sleep 100 & echo $!; exec sleep 100"),
	};
	char line[64];
	uint64_t pid;
	int fd;

	fd = agent_connect(_metadata, self);
	ASSERT_EQ(0, agent_client__start(fd, &o));
	started_with_line(_metadata, self, fd, &pid, line, sizeof(line));
	ASSERT_FALSE(pid_gone(pid));
	close(fd);
	EXPECT_TRUE(wait_gone(pid));
	EXPECT_TRUE(wait_gone(atoi(line)));
}

/* The host leaves while the agent holds stdin it cannot write: killed. */
TEST_F(agent, exec_abort_while_stdin_waits)
{
	struct agent_exec_opts o = { .argv = ARGV("sleep", "100") };
	struct agent_msg m;
	uint64_t pid = 0;
	uint8_t *data;
	int fd;

	data = calloc(1, KILN_DATA_CHUNK);
	ASSERT_NE(NULL, data);
	ASSERT_EQ(0, agent_msg__init(&m));
	fd = agent_connect(_metadata, self);
	ASSERT_EQ(0, agent_client__start(fd, &o));
	ASSERT_EQ(0, agent_client__recv(fd, &m));
	ASSERT_EQ(KILN_MSG_PROC_STARTED, m.type);
	ASSERT_TRUE(agent_msg__u64(&m, KILN_T_PID, &pid));
	/* One frame in the pipe, one held, one left unread, and more. */
	for (int i = 0; i < 4; i++)
		ASSERT_EQ(0, agent_client__send(fd, KILN_MSG_PROC_STDIN, 0,
						data, KILN_DATA_CHUNK));
	usleep(100 * 1000);
	ASSERT_FALSE(pid_gone(pid));
	close(fd);
	EXPECT_TRUE(wait_gone(pid));
	agent_msg__free(&m);
	free(data);
}

/*
 * A background child holding stdout open delays PROC_EXIT 100 ms only:
 * it holds it for ever, so an agent that waited for the end of the
 * output would never answer (the test's timeout).
 */
TEST_F(agent, exec_output_grace_after_exit)
{
	struct agent_exec_result r;
	char script[PATH_MAX + 32];

	snprintf(script, sizeof(script), "%s & echo $!; echo done",
		 forever(_metadata, self));
	run(_metadata, self,
	    &(struct agent_exec_opts){ .argv = ARGV("sh", "-c", script) }, &r);
	EXPECT_EQ(0, r.error);
	EXPECT_EQ(0, r.exit_code);
	EXPECT_NE(NULL, strstr((char *)r.out, "\ndone\n"));
	kill(atoi((char *)r.out), SIGKILL);
	agent_exec_result__free(&r);
}

TEST_F(agent, exec_malformed_frame_kills_the_command)
{
	struct agent_exec_opts o = { .argv = ARGV("sleep", "100"),
				     .keep_stdin_open = true };
	struct agent_exec_result r;
	int fd;

	fd = agent_connect(_metadata, self);
	ASSERT_EQ(0, agent_client__start(fd, &o));
	/* A file request in the middle of a process: not acceptable. */
	ASSERT_EQ(0, agent_client__send(fd, KILN_MSG_FS_STAT, 0, NULL, 0));
	ASSERT_EQ(0, agent_exec_result__init(&r));
	ASSERT_EQ(0, agent_client__finish(fd, &o, &r));
	EXPECT_EQ(EPROTO, r.error);
	EXPECT_STREQ("EPROTO", r.errname);
	EXPECT_EQ(-ECONNRESET, agent_client__recv(fd, &self->m));
	close(fd);
	ASSERT_LT(0, r.pid);
	EXPECT_TRUE(wait_gone(r.pid));
	agent_exec_result__free(&r);
}

/* ---- T_USER ------------------------------------------------------------ */

/*
 * nobody of the host's /etc/passwd (the agent's, as the guest's is in
 * a VM): false, with a skip, where the agent cannot change user.
 */
static bool nobody(struct __test_metadata *_metadata, struct passwd *out,
		   char *uid, size_t len)
{
	struct passwd *pw = getpwnam("nobody");

	if (geteuid())
		SKIP(return false, "the agent changes user only as root");
	ASSERT_NE(NULL, pw) TH_LOG("no user nobody in /etc/passwd");
	*out = *pw;
	snprintf(uid, len, "%u", (unsigned)pw->pw_uid);
	return true;
}

/*
 * By name and by uid: the uid, gid, HOME, USER and LOGNAME of the
 * passwd entry, and the home as the working directory ("/" when it is
 * not a directory, as nobody's /nonexistent is not).
 */
TEST_F(agent, exec_as_user)
{
	static const char script[] = "echo \"$(id -u) $(id -g) $HOME $USER "
				     "$LOGNAME $KILN_AGENT_TEST_MARK\"; pwd";
	const char *as[2] = { "nobody", NULL };
	struct agent_exec_result r;
	char uid[16], want[512];
	struct stat st;
	struct passwd pw;

	if (!nobody(_metadata, &pw, uid, sizeof(uid)))
		return;
	as[1] = uid;
	snprintf(want, sizeof(want), "%u %u %s nobody nobody inherited\n%s\n",
		 (unsigned)pw.pw_uid, (unsigned)pw.pw_gid, pw.pw_dir,
		 stat(pw.pw_dir, &st) || !S_ISDIR(st.st_mode) ? "/" :
								pw.pw_dir);
	for (int i = 0; i < 2; i++) {
		run(_metadata, self,
		    &(struct agent_exec_opts){ .argv = ARGV("sh", "-c", script),
					       .user = as[i] },
		    &r);
		EXPECT_EQ(0, r.error) TH_LOG("%s: %s", as[i], r.message);
		EXPECT_STREQ(want, (char *)r.out) TH_LOG("user %s", as[i]);
		agent_exec_result__free(&r);
	}

	/* root by uid: its home (a directory) is where it runs. */
	pw = *getpwuid(0);
	snprintf(want, sizeof(want), "0 %s root\n%s\n", pw.pw_dir, pw.pw_dir);
	run(_metadata, self,
	    &(struct agent_exec_opts){
		    .argv = ARGV("sh", "-c", "echo $(id -u) $HOME $USER; pwd"),
		    .user = "0" },
	    &r);
	EXPECT_STREQ(want, (char *)r.out);
	agent_exec_result__free(&r);

	/* T_CWD wins over the home. */
	run(_metadata, self,
	    &(struct agent_exec_opts){
		    .argv = ARGV("pwd"), .user = "0", .cwd = self->work },
	    &r);
	snprintf(want, sizeof(want), "%s\n", self->work);
	EXPECT_STREQ(want, (char *)r.out);
	agent_exec_result__free(&r);
}

/*
 * The user's variables under the request's: merged env sets them
 * unless it names them; a replacing env is the whole environment.
 */
TEST_F(agent, exec_as_user_environment)
{
	static const char script[] = "echo \"$HOME|$USER|${LOGNAME-unset}\"";
	struct agent_exec_result r;
	char uid[16], want[512];
	struct passwd pw;

	if (!nobody(_metadata, &pw, uid, sizeof(uid)))
		return;
	run(_metadata, self,
	    &(struct agent_exec_opts){ .argv = ARGV("sh", "-c", script),
				       .envp = ARGV("USER=someone"),
				       .env_merge = 1,
				       .user = "nobody" },
	    &r);
	snprintf(want, sizeof(want), "%s|someone|nobody\n", pw.pw_dir);
	EXPECT_STREQ(want, (char *)r.out);
	agent_exec_result__free(&r);

	run(_metadata, self,
	    &(struct agent_exec_opts){
		    .argv = ARGV("sh", "-c", script),
		    .envp = ARGV("PATH=/usr/bin:/bin", "HOME=/h", "USER=u"),
		    .user = "nobody" },
	    &r);
	EXPECT_STREQ("/h|u|unset\n", (char *)r.out);
	agent_exec_result__free(&r);
}

/* A pty for a user is theirs: the slave belongs to them. */
TEST_F(agent, pty_as_user_owns_the_terminal)
{
	struct agent_exec_result r;
	char uid[16], want[64];
	struct passwd pw;

	if (!nobody(_metadata, &pw, uid, sizeof(uid)))
		return;
	run(_metadata, self,
	    &(struct agent_exec_opts){
		    .argv = ARGV("sh", "-c",
				 "echo $(id -u) $(stat -c %u \"$(tty)\")"),
		    .pty = true,
		    .user = uid },
	    &r);
	EXPECT_EQ(0, r.error) TH_LOG("%s", r.message);
	snprintf(want, sizeof(want), "%s %s", uid, uid);
	EXPECT_NE(NULL, strstr((char *)r.out, want)) TH_LOG("out: %s", r.out);
	agent_exec_result__free(&r);
}

/*
 * No such user, by name or uid: ENOENT naming it, with T_USER; an
 * empty T_USER, one with a NUL or over KILN_USER_MAX is malformed.
 */
TEST_F(agent, exec_as_unknown_or_bad_user)
{
	static const char *const unknown[] = { "kiln-no-such-user",
					       "4000000000", "4294967295" };
	struct agent_exec_result r;
	char msg[128], big[KILN_USER_MAX + 2];

	for (size_t i = 0; i < ARRAY_SIZE(unknown); i++) {
		run(_metadata, self,
		    &(struct agent_exec_opts){ .argv = ARGV("true"),
					       .user = unknown[i] },
		    &r);
		EXPECT_EQ(ENOENT, r.error);
		EXPECT_STREQ(unknown[i], r.err_user);
		snprintf(msg, sizeof(msg),
			 "no user \"%s\" in the guest's /etc/passwd",
			 unknown[i]);
		EXPECT_STREQ(msg, r.message);
		EXPECT_STREQ("", r.err_cwd);
		agent_exec_result__free(&r);
	}

	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	const struct agent_exec_opts bad[] = {
		{ .argv = ARGV("true"), .user = "" },
		{ .argv = ARGV("true"), .user = "ro\0ot", .user_len = 5 },
		{ .argv = ARGV("true"), .user = big },
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		run(_metadata, self, &bad[i], &r);
		EXPECT_EQ(EINVAL, r.error) TH_LOG("case %zu", i);
		EXPECT_STREQ("T_USER is not a user name or uid", r.message);
		EXPECT_STREQ("", r.err_user);
		agent_exec_result__free(&r);
	}
}

/* ---- pty ----------------------------------------------------------------- */

TEST_F(agent, pty_has_the_size_asked_for)
{
	struct agent_exec_result r;

	run(_metadata, self,
	    &(struct agent_exec_opts){
		    .argv = ARGV("sh", "-c",
				 "test -t 0 && test -t 2 && stty size"),
		    .pty = true,
		    .rows = 33,
		    .cols = 111 },
	    &r);
	EXPECT_EQ(0, r.error);
	EXPECT_EQ(0, r.exit_code);
	EXPECT_NE(NULL, strstr((char *)r.out, "33 111"))
	TH_LOG("out: %s", r.out);
	EXPECT_EQ(0, r.err_len); /* a terminal has one output */
	agent_exec_result__free(&r);
}

/* PROC_RESIZE: the new size, and SIGWINCH for the foreground. */
TEST_F(agent, pty_resize_is_seen)
{
	struct agent_exec_opts o = {
		.argv = ARGV("sh", "-c",
			     "trap 'echo winch' WINCH; echo ready; read x; "
			     "stty size"),
		.pty = true,
		.rows = 24,
		.cols = 80,
		.keep_stdin_open = true,
	};
	struct agent_exec_result r;
	struct kiln_buf b;
	char line[256];
	uint64_t pid;
	int fd;

	fd = agent_connect(_metadata, self);
	ASSERT_EQ(0, agent_client__start(fd, &o));
	/* The trap is set once "ready" is out. */
	started_with_line(_metadata, self, fd, &pid, line, sizeof(line));
	kiln_buf__init(&b);
	kiln_tlv__put_u64(&b, KILN_T_ROWS, 50);
	kiln_tlv__put_u64(&b, KILN_T_COLS, 132);
	ASSERT_EQ(0, agent_client__send_buf(fd, KILN_MSG_PROC_RESIZE, &b));
	kiln_buf__free(&b);
	ASSERT_EQ(0, agent_client__send(fd, KILN_MSG_PROC_STDIN, 0, "go\n", 3));
	ASSERT_EQ(0, agent_exec_result__init(&r));
	ASSERT_EQ(0, agent_client__finish(fd, &o, &r));
	close(fd);
	EXPECT_EQ(0, r.error);
	EXPECT_EQ(0, r.exit_code);
	EXPECT_NE(NULL, strstr((char *)r.out, "50 132"))
	TH_LOG("out: %s", r.out);
	EXPECT_NE(NULL, strstr((char *)r.out, "winch"))
	TH_LOG("out: %s", r.out);
	agent_exec_result__free(&r);
}

/* End of stdin on a terminal is its EOF character: cat ends. */
TEST_F(agent, pty_stdin_and_eof)
{
	struct agent_exec_result r;

	run(_metadata, self,
	    &(struct agent_exec_opts){ .argv = ARGV("cat"),
				       .pty = true,
				       .in = "abc\n",
				       .in_len = 4 },
	    &r);
	EXPECT_EQ(0, r.error);
	EXPECT_EQ(0, r.exit_code)
	TH_LOG("out: %s sig %d", r.out, (int)r.signal);
	EXPECT_NE(NULL, strstr((char *)r.out, "abc")) TH_LOG("out: %s", r.out);
	agent_exec_result__free(&r);
}

/* ---- concurrency --------------------------------------------------------- */

/*
 * Fifty at once: each waits on its own FIFO until the test opens it, and
 * the test opens them last first. The last can only be released once it
 * runs while the first 49 still wait: an agent that ran them one after
 * the other (or fewer at a time) never gets there, and the test hangs
 * until its timeout.
 */
TEST_F(agent, fifty_concurrent_execs)
{
	enum { N = 50 };
	struct agent_exec_opts o = { .keep_stdin_open = true };
	struct agent_exec_result r;
	char env[N][32], want[32], script[PATH_MAX + 64], fifo[PATH_MAX];
	const char *envp[N][2];
	int fds[N], fd;

	snprintf(script, sizeof(script), "read x < %s/go.$KILN_N; echo $KILN_N",
		 self->dir);
	o.argv = ARGV("sh", "-c", script);
	for (int i = 0; i < N; i++) {
		snprintf(fifo, sizeof(fifo), "%s/go.%d", self->dir, i);
		ASSERT_EQ(0, mkfifo(fifo, 0600));
	}
	for (int i = 0; i < N; i++) {
		snprintf(env[i], sizeof(env[i]), "KILN_N=%d", i);
		envp[i][0] = env[i];
		envp[i][1] = NULL;
		o.envp = envp[i];
		fds[i] = agent_connect(_metadata, self);
		ASSERT_EQ(0, agent_client__start(fds[i], &o));
	}
	/* Opening for writing waits for the reader: exec i at its read. */
	for (int i = N - 1; i >= 0; i--) {
		snprintf(fifo, sizeof(fifo), "%s/go.%d", self->dir, i);
		fd = open(fifo, O_WRONLY | O_CLOEXEC);
		ASSERT_LE(0, fd);
		close(fd); /* end of file: the read returns, the echo runs */
	}
	for (int i = 0; i < N; i++) {
		ASSERT_EQ(0, agent_exec_result__init(&r));
		ASSERT_EQ(0, agent_client__finish(fds[i], &o, &r));
		close(fds[i]);
		snprintf(want, sizeof(want), "%d\n", i);
		EXPECT_EQ(0, r.error);
		EXPECT_EQ(0, r.exit_code);
		EXPECT_STREQ(want, (char *)r.out);
		agent_exec_result__free(&r);
	}
}

/* ---- files --------------------------------------------------------------- */

TEST_F(agent, fs_stat)
{
	const char *file = wpath(self, "f"), *link = wpath(self, "l");
	char target[64];
	struct stat st;

	write_file(file, "12345", 5);
	chmod(file, 0640);
	ASSERT_EQ(0, stat(file, &st));
	ASSERT_EQ(0, FS(STAT, .path = file));
	EXPECT_EQ(KILN_FILE_REGULAR, result_u64(_metadata, self, KILN_T_TYPE));
	EXPECT_EQ(5, result_u64(_metadata, self, KILN_T_SIZE));
	EXPECT_EQ(S_IFREG | 0640, result_u64(_metadata, self, KILN_T_MODE));
	EXPECT_EQ((uint64_t)st.st_mtim.tv_sec * 1000000000ULL +
			  st.st_mtim.tv_nsec,
		  result_u64(_metadata, self, KILN_T_MTIME_NS));
	EXPECT_EQ(getuid(), result_u64(_metadata, self, KILN_T_UID));
	EXPECT_EQ(getgid(), result_u64(_metadata, self, KILN_T_GID));

	ASSERT_EQ(0, FS(STAT, .path = self->work));
	EXPECT_EQ(KILN_FILE_DIRECTORY,
		  result_u64(_metadata, self, KILN_T_TYPE));

	/* lstat: the link itself, with its target. */
	ASSERT_EQ(0, symlink("f", link));
	ASSERT_EQ(0, FS(STAT, .path = link));
	EXPECT_EQ(KILN_FILE_SYMLINK, result_u64(_metadata, self, KILN_T_TYPE));
	ASSERT_TRUE(agent_msg__str(&self->m, KILN_T_LINK_TARGET, target,
				   sizeof(target)));
	EXPECT_STREQ("f", target);

	EXPECT_EQ(ENOENT, FS(STAT, .path = wpath(self, "missing")));
	EXPECT_EQ(ENOTDIR, FS(STAT, .path = wpath(self, "f/child")));
	EXPECT_EQ(EINVAL, FS(STAT, .path = "relative/path"));
	EXPECT_EQ(EPROTO, FS(STAT, .path = NULL));
}

struct entry {
	char name[256];
	uint64_t type, size;
	char target[256];
};

/* FS_READDIR, every RESULT frame: entries into @e, frames into *frames. */
static int readdir_all(struct __test_metadata *_metadata,
		       FIXTURE_DATA(agent) * self, const char *path,
		       struct entry *e, int max, int *n, int *frames)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	struct kiln_buf b;
	uint64_t more;
	uint16_t tag;
	uint32_t len;
	int fd, err;

	*n = *frames = 0;
	fd = agent_connect(_metadata, self);
	build_fs(&b, &(struct fs_args){ .path = path });
	ASSERT_EQ(0, agent_client__send_buf(fd, KILN_MSG_FS_READDIR, &b));
	kiln_buf__free(&b);
	do {
		ASSERT_EQ(0, agent_client__recv(fd, &self->m));
		err = answer(_metadata, self);
		if (err)
			break;
		++*frames;
		kiln_tlv__iter(&it, self->m.data, self->m.len);
		while (kiln_tlv__next(&it, &tag, &val, &len) > 0) {
			if (tag != KILN_T_ENTRY)
				continue;
			ASSERT_GT(max, *n);
			memset(&e[*n], 0, sizeof(e[*n]));
			ASSERT_TRUE(agent_tlv__str(val, len, KILN_T_NAME,
						   e[*n].name,
						   sizeof(e[*n].name)));
			agent_tlv__u64(val, len, KILN_T_TYPE, &e[*n].type);
			agent_tlv__u64(val, len, KILN_T_SIZE, &e[*n].size);
			agent_tlv__str(val, len, KILN_T_LINK_TARGET,
				       e[*n].target, sizeof(e[*n].target));
			++*n;
		}
		more = 0;
		agent_msg__u64(&self->m, KILN_T_MORE, &more);
	} while (more);
	close(fd);
	return err;
}

static const struct entry *find_entry(const struct entry *e, int n,
				      const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(e[i].name, name))
			return &e[i];
	return NULL;
}

TEST_F(agent, fs_readdir)
{
	static const char raw[] = "raw-\xff\xfe-name"; /* not UTF-8 */
	struct entry e[16];
	const struct entry *x;
	int n, frames;

	write_file(wpath(self, "a"), "xyz", 3);
	ASSERT_EQ(0, mkdir(wpath(self, "d"), 0755));
	ASSERT_EQ(0, symlink("a", wpath(self, "l")));
	write_file(wpath(self, raw), "", 0);

	ASSERT_EQ(0,
		  readdir_all(_metadata, self, self->work, e, 16, &n, &frames));
	EXPECT_EQ(4, n);
	EXPECT_EQ(1, frames);
	x = find_entry(e, n, "a");
	ASSERT_NE(NULL, x);
	EXPECT_EQ(KILN_FILE_REGULAR, x->type);
	EXPECT_EQ(3, x->size);
	x = find_entry(e, n, "d");
	ASSERT_NE(NULL, x);
	EXPECT_EQ(KILN_FILE_DIRECTORY, x->type);
	x = find_entry(e, n, "l");
	ASSERT_NE(NULL, x);
	EXPECT_EQ(KILN_FILE_SYMLINK, x->type);
	EXPECT_STREQ("a", x->target);
	x = find_entry(e, n, raw);
	ASSERT_NE(NULL, x) TH_LOG("the non-UTF-8 name did not come back");
	EXPECT_EQ(KILN_FILE_REGULAR, x->type);
	EXPECT_EQ(NULL, find_entry(e, n, "."));
	EXPECT_EQ(NULL, find_entry(e, n, ".."));

	EXPECT_EQ(ENOENT, readdir_all(_metadata, self, wpath(self, "missing"),
				      e, 16, &n, &frames));
	EXPECT_EQ(ENOTDIR, readdir_all(_metadata, self, wpath(self, "a"), e, 16,
				       &n, &frames));
}

/* More than a frame holds: several RESULT frames, T_MORE on all but one. */
TEST_F(agent, fs_readdir_many_frames)
{
	enum { N = 2000 };
	static struct entry e[N + 1];
	char name[256], *seen;
	int n, frames, i;

	seen = calloc(N, 1);
	for (i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "%04d-%0200d", i, 0);
		write_file(wpath(self, name), "", 0);
	}
	ASSERT_EQ(0, readdir_all(_metadata, self, self->work, e, N + 1, &n,
				 &frames));
	EXPECT_EQ(N, n);
	EXPECT_LT(1, frames);
	for (i = 0; i < n; i++) {
		int k = atoi(e[i].name);

		ASSERT_EQ(205, strlen(e[i].name));
		ASSERT_FALSE(seen[k]);
		seen[k] = 1;
	}
	free(seen);
}

TEST_F(agent, fs_read_whole_and_ranges)
{
	size_t len = 150000, got;
	char *data = malloc(len), *out;

	for (size_t i = 0; i < len; i++)
		data[i] = 'a' + i % 26;
	write_file(wpath(self, "f"), data, len);

	ASSERT_EQ(0, fs_read(_metadata, self,
			     &(struct fs_args){ .path = wpath(self, "f") },
			     &out, &got));
	ASSERT_EQ(len, got);
	EXPECT_EQ(0, memcmp(data, out, len));
	free(out);

	ASSERT_EQ(0, fs_read(_metadata, self,
			     &(struct fs_args){ .path = wpath(self, "f"),
						.offset = 70000,
						.has_offset = true,
						.length = 5000,
						.has_length = true },
			     &out, &got));
	ASSERT_EQ(5000, got);
	EXPECT_EQ(0, memcmp(data + 70000, out, 5000));
	free(out);

	/* A range past the end: what there is. */
	ASSERT_EQ(0, fs_read(_metadata, self,
			     &(struct fs_args){ .path = wpath(self, "f"),
						.offset = len - 10,
						.has_offset = true,
						.length = 100,
						.has_length = true },
			     &out, &got));
	EXPECT_EQ(10, got);
	free(out);
	ASSERT_EQ(0, fs_read(_metadata, self,
			     &(struct fs_args){ .path = wpath(self, "f"),
						.offset = len + 10,
						.has_offset = true },
			     &out, &got));
	EXPECT_EQ(0, got);
	free(out);

	EXPECT_EQ(EISDIR,
		  fs_read(_metadata, self,
			  &(struct fs_args){ .path = self->work }, &out, &got));
	free(out);
	EXPECT_EQ(ENOENT,
		  fs_read(_metadata, self,
			  &(struct fs_args){ .path = wpath(self, "missing") },
			  &out, &got));
	free(out);
	free(data);
}

TEST_F(agent, fs_write)
{
	const char *f = wpath(self, "f");
	struct stat st;
	size_t len;
	char *s;

	/* Three frames, the last with EOF. */
	ASSERT_EQ(0, fs_write(_metadata, self, &(struct fs_args){ .path = f },
			      "hello world", 11, 4));
	EXPECT_EQ(11, result_u64(_metadata, self, KILN_T_SIZE));
	s = read_file(f, &len);
	EXPECT_STREQ("hello world", s);
	free(s);
	ASSERT_EQ(0, stat(f, &st));
	EXPECT_EQ(0644, st.st_mode & 07777);

	/* Truncated, and the mode asked for. */
	ASSERT_EQ(0,
		  fs_write(_metadata, self,
			   &(struct fs_args){
				   .path = f, .mode = 0600, .has_mode = true },
			   "bye", 3, 64));
	s = read_file(f, &len);
	EXPECT_STREQ("bye", s);
	free(s);
	ASSERT_EQ(0, stat(f, &st));
	EXPECT_EQ(0600, st.st_mode & 07777);

	/* An empty file: one empty frame with EOF. */
	ASSERT_EQ(0, fs_write(_metadata, self, &(struct fs_args){ .path = f },
			      "", 0, 64));
	EXPECT_EQ(0, result_u64(_metadata, self, KILN_T_SIZE));

	ASSERT_EQ(0, fs_write(_metadata, self,
			      &(struct fs_args){ .path = wpath(self, "p/q/r/f"),
						 .parents = true },
			      "deep", 4, 64));
	s = read_file(wpath(self, "p/q/r/f"), &len);
	EXPECT_STREQ("deep", s);
	free(s);

	/* Errors, with the data still coming: the agent takes it. */
	EXPECT_EQ(ENOENT,
		  fs_write(_metadata, self,
			   &(struct fs_args){ .path = wpath(self, "x/y/f") },
			   "data", 4, 1));
	EXPECT_EQ(EISDIR, fs_write(_metadata, self,
				   &(struct fs_args){ .path = self->work },
				   "data", 4, 1));
	/* A FIFO nobody reads: not a hang. */
	ASSERT_EQ(0, mkfifo(wpath(self, "fifo"), 0644));
	EXPECT_EQ(ENXIO,
		  fs_write(_metadata, self,
			   &(struct fs_args){ .path = wpath(self, "fifo") },
			   "data", 4, 1));
	EXPECT_EQ(ENOTDIR,
		  fs_write(_metadata, self,
			   &(struct fs_args){ .path = wpath(self, "f/g") },
			   "data", 4, 1));
	EXPECT_EQ(ENOTDIR,
		  fs_write(_metadata, self,
			   &(struct fs_args){ .path = wpath(self, "f/g/h"),
					      .parents = true },
			   "data", 4, 1));
}

TEST_F(agent, fs_mkdir)
{
	struct stat st;

	ASSERT_EQ(0, FS(MKDIR, .path = wpath(self, "d")));
	ASSERT_EQ(0, stat(wpath(self, "d"), &st));
	EXPECT_TRUE(S_ISDIR(st.st_mode));
	EXPECT_EQ(0755, st.st_mode & 07777);
	EXPECT_EQ(EEXIST, FS(MKDIR, .path = wpath(self, "d")));
	EXPECT_EQ(ENOENT, FS(MKDIR, .path = wpath(self, "x/y")));

	ASSERT_EQ(0, FS(MKDIR, .path = wpath(self, "a/b/c/"), .recursive = true,
			.mode = 0700, .has_mode = true));
	ASSERT_EQ(0, stat(wpath(self, "a/b/c"), &st));
	EXPECT_EQ(0700, st.st_mode & 07777);
	ASSERT_EQ(0, stat(wpath(self, "a/b"), &st));
	EXPECT_EQ(0755, st.st_mode & 07777);
	/* mkdir -p of what exists is fine... */
	EXPECT_EQ(0, FS(MKDIR, .path = wpath(self, "a/b"), .recursive = true));
	/* ...unless it is not a directory. */
	write_file(wpath(self, "f"), "", 0);
	EXPECT_EQ(EEXIST,
		  FS(MKDIR, .path = wpath(self, "f"), .recursive = true));
	EXPECT_EQ(ENOTDIR,
		  FS(MKDIR, .path = wpath(self, "f/g"), .recursive = true));
}

TEST_F(agent, fs_remove)
{
	char outside[PATH_MAX];
	struct stat st;

	snprintf(outside, sizeof(outside), "%s", wpath(self, "outside"));

	write_file(wpath(self, "f"), "", 0);
	ASSERT_EQ(0, FS(REMOVE, .path = wpath(self, "f")));
	EXPECT_NE(0, access(wpath(self, "f"), F_OK));
	EXPECT_EQ(ENOENT, FS(REMOVE, .path = wpath(self, "f")));
	EXPECT_EQ(0, FS(REMOVE, .path = wpath(self, "f"), .force = true));

	/* A directory: rmdir semantics without T_RECURSIVE. */
	ASSERT_EQ(0, mkdir(wpath(self, "e"), 0755));
	EXPECT_EQ(0, FS(REMOVE, .path = wpath(self, "e")));
	ASSERT_EQ(0, mkdir(wpath(self, "t"), 0755));
	ASSERT_EQ(0, mkdir(wpath(self, "t/u"), 0755));
	write_file(wpath(self, "t/u/f"), "x", 1);
	EXPECT_EQ(ENOTEMPTY, FS(REMOVE, .path = wpath(self, "t")));

	/* A tree with a symlink out of it: the link goes, not its target. */
	ASSERT_EQ(0, mkdir(outside, 0755));
	write_file(wpath(self, "outside/keep"), "k", 1);
	ASSERT_EQ(0, symlink(outside, wpath(self, "t/u/link")));
	ASSERT_EQ(0, FS(REMOVE, .path = wpath(self, "t"), .recursive = true));
	EXPECT_NE(0, lstat(wpath(self, "t"), &st));
	EXPECT_EQ(0, stat(wpath(self, "outside/keep"), &st));

	/* A symlink to a directory, even recursive: just the link. */
	ASSERT_EQ(0, symlink(outside, wpath(self, "dl")));
	ASSERT_EQ(0, FS(REMOVE, .path = wpath(self, "dl"), .recursive = true));
	EXPECT_NE(0, lstat(wpath(self, "dl"), &st));
	EXPECT_EQ(0, stat(wpath(self, "outside/keep"), &st));

	EXPECT_EQ(0, FS(REMOVE, .path = wpath(self, "nothing/here"),
			.recursive = true, .force = true));
	EXPECT_EQ(EBUSY, FS(REMOVE, .path = "/", .recursive = true));
}

/* A mount inside the tree is not emptied: EBUSY, its files untouched. */
TEST_F(agent, fs_remove_stays_on_its_file_system)
{
	struct stat st;

	ASSERT_EQ(0, mkdir(wpath(self, "t"), 0755));
	ASSERT_EQ(0, mkdir(wpath(self, "t/m"), 0755));
	if (mount("tmpfs", wpath(self, "t/m"), "tmpfs", 0, NULL))
		SKIP(return, "cannot mount a tmpfs: %s", strerror(errno));
	write_file(wpath(self, "t/m/precious"), "p", 1);
	write_file(wpath(self, "t/other"), "o", 1);
	EXPECT_EQ(EBUSY,
		  FS(REMOVE, .path = wpath(self, "t"), .recursive = true));
	EXPECT_EQ(0, stat(wpath(self, "t/m/precious"), &st));
	EXPECT_EQ(0, umount(wpath(self, "t/m")));
	EXPECT_EQ(0, FS(REMOVE, .path = wpath(self, "t"), .recursive = true));
}

TEST_F(agent, fs_rename)
{
	size_t len;
	char *s;

	write_file(wpath(self, "a"), "A", 1);
	ASSERT_EQ(0, FS(RENAME, .path = wpath(self, "a"),
			.path2 = wpath(self, "b")));
	s = read_file(wpath(self, "b"), &len);
	EXPECT_STREQ("A", s);
	free(s);
	EXPECT_NE(0, access(wpath(self, "a"), F_OK));
	EXPECT_EQ(ENOENT, FS(RENAME, .path = wpath(self, "a"),
			     .path2 = wpath(self, "c")));
	/* No parent creation. */
	EXPECT_EQ(ENOENT, FS(RENAME, .path = wpath(self, "b"),
			     .path2 = wpath(self, "x/y")));
	ASSERT_EQ(0, mkdir(wpath(self, "d"), 0755));
	EXPECT_EQ(0, FS(RENAME, .path = wpath(self, "d"),
			.path2 = wpath(self, "d2")));
	EXPECT_EQ(EPROTO, FS(RENAME, .path = wpath(self, "b")));
}

/* ---- 64 MiB each way -------------------------------------------------- */

static uint8_t pattern_byte(uint64_t off)
{
	return (uint8_t)(off * 13 + (off >> 16) * 7 + (off >> 9));
}

/* The peak RSS (KiB) of the agent's connection process, the only child. */
static long connection_hwm_kib(pid_t agent)
{
	char path[64], buf[4096], *s;
	struct dirent *d;
	pid_t child = 0;
	long kib = -1;
	int fd, ppid;
	DIR *dir;
	ssize_t n;

	dir = opendir("/proc");
	while (dir && (d = readdir(dir))) {
		if (d->d_name[0] < '1' || d->d_name[0] > '9')
			continue;
		if (snprintf(path, sizeof(path), "/proc/%s/stat", d->d_name) >=
		    (int)sizeof(path))
			continue;
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		s = strrchr(buf, ')');
		if (s && sscanf(s + 2, "%*c %d", &ppid) == 1 && ppid == agent &&
		    s[2] != 'Z')
			child = atoi(d->d_name);
	}
	if (dir)
		closedir(dir);
	if (!child)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/status", child);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	s = strstr(buf, "VmHWM:");
	if (s)
		sscanf(s, "VmHWM: %ld kB", &kib);
	return kib;
}

TEST_F_TIMEOUT(agent, fs_64_mib_both_ways_in_little_memory, 120)
{
	const uint64_t size = 64 * MiB;
	const char *f = wpath(self, "big");
	uint64_t off = 0, mismatch = UINT64_MAX;
	struct kiln_buf b;
	uint8_t *chunk;
	long hwm = -1;
	struct stat st;
	int fd;

	chunk = malloc(KILN_DATA_CHUNK);
	ASSERT_NE(NULL, chunk);

	/* Host -> guest. */
	fd = agent_connect(_metadata, self);
	build_fs(&b, &(struct fs_args){ .path = f });
	ASSERT_EQ(0, agent_client__send_buf(fd, KILN_MSG_FS_WRITE, &b));
	kiln_buf__free(&b);
	for (off = 0; off < size; off += KILN_DATA_CHUNK) {
		for (uint32_t i = 0; i < KILN_DATA_CHUNK; i++)
			chunk[i] = pattern_byte(off + i);
		ASSERT_EQ(0, agent_client__send(fd, KILN_MSG_FS_DATA,
						off + KILN_DATA_CHUNK == size ?
							KILN_F_EOF :
							0,
						chunk, KILN_DATA_CHUNK));
		if (off == size / 2)
			hwm = connection_hwm_kib(self->pid);
	}
	ASSERT_EQ(0, agent_client__recv(fd, &self->m));
	close(fd);
	ASSERT_EQ(0, answer(_metadata, self));
	EXPECT_EQ(size, result_u64(_metadata, self, KILN_T_SIZE));
	ASSERT_EQ(0, stat(f, &st));
	EXPECT_EQ(size, (uint64_t)st.st_size);
	ASSERT_LT(0, hwm) TH_LOG("no connection process found");
	EXPECT_GT(RSS_LIMIT_KIB, hwm) TH_LOG("writing: VmHWM %ld kB", hwm);

	/* The writer may still be exiting: let it go first. */
	for (int i = 0; i < 200 && connection_hwm_kib(self->pid) > 0; i++)
		usleep(10 * 1000);

	/* Guest -> host, checked as it comes. */
	hwm = -1;
	fd = agent_connect(_metadata, self);
	build_fs(&b, &(struct fs_args){ .path = f });
	ASSERT_EQ(0, agent_client__send_buf(fd, KILN_MSG_FS_READ, &b));
	kiln_buf__free(&b);
	for (off = 0;;) {
		ASSERT_EQ(0, agent_client__recv(fd, &self->m));
		if (self->m.type != KILN_MSG_FS_DATA)
			break;
		for (uint32_t i = 0; i < self->m.len; i++)
			if (self->m.data[i] != pattern_byte(off + i) &&
			    mismatch == UINT64_MAX)
				mismatch = off + i;
		off += self->m.len;
		if (hwm < 0 && off >= size / 2)
			hwm = connection_hwm_kib(self->pid);
	}
	close(fd);
	ASSERT_EQ(0, answer(_metadata, self));
	EXPECT_EQ(size, off);
	EXPECT_EQ(size, result_u64(_metadata, self, KILN_T_SIZE));
	EXPECT_EQ(UINT64_MAX, mismatch);
	ASSERT_LT(0, hwm) TH_LOG("no connection process found");
	EXPECT_GT(RSS_LIMIT_KIB, hwm) TH_LOG("reading: VmHWM %ld kB", hwm);
	free(chunk);
}

/* ---- facts --------------------------------------------------------------- */

/*
 * The value of the first fact {topic, relation} (with @want: the fact
 * {topic, relation, want}), or false.
 */
static bool fact(const struct agent_msg *m, const char *topic,
		 const char *relation, const char *want, char *value,
		 size_t size)
{
	struct kiln_tlv_iter it;
	char t[64], r[64];
	const uint8_t *val;
	uint16_t tag;
	uint32_t len;

	kiln_tlv__iter(&it, m->data, m->len);
	while (kiln_tlv__next(&it, &tag, &val, &len) > 0) {
		if (tag != KILN_T_FACT ||
		    !agent_tlv__str(val, len, KILN_T_TOPIC, t, sizeof(t)) ||
		    !agent_tlv__str(val, len, KILN_T_RELATION, r, sizeof(r)) ||
		    !agent_tlv__str(val, len, KILN_T_VALUE, value, size))
			continue;
		if (!strcmp(t, topic) && !strcmp(r, relation) &&
		    (!want || !strcmp(value, want)))
			return true;
	}
	return false;
}

TEST_F(agent, facts)
{
	char value[256], host[256];
	struct utsname u;
	int fd;

	fd = agent_connect(_metadata, self);
	ASSERT_EQ(0, agent_client__send(fd, KILN_MSG_FACTS, 0, NULL, 0));
	ASSERT_EQ(0, agent_client__recv(fd, &self->m));
	close(fd);
	ASSERT_EQ(KILN_MSG_RESULT, self->m.type);
	ASSERT_EQ(0, uname(&u));
	ASSERT_TRUE(fact(&self->m, "kernel", "is", NULL, value, sizeof(value)));
	EXPECT_STREQ(u.sysname, value);
	ASSERT_TRUE(fact(&self->m, "kernel-release", "is", NULL, value,
			 sizeof(value)));
	EXPECT_STREQ(u.release, value);
	ASSERT_TRUE(fact(&self->m, "architecture", "is", NULL, value,
			 sizeof(value)));
	EXPECT_STREQ(u.machine, value);
	ASSERT_EQ(0, gethostname(host, sizeof(host)));
	ASSERT_TRUE(
		fact(&self->m, "hostname", "is", NULL, value, sizeof(value)));
	EXPECT_STREQ(host, value);
	ASSERT_TRUE(
		fact(&self->m, "cpu-count", "is", NULL, value, sizeof(value)));
	EXPECT_LT(0, atoi(value));
	ASSERT_TRUE(fact(&self->m, "memory-bytes", "is", NULL, value,
			 sizeof(value)));
	EXPECT_LT(0, atoll(value));
	/* sh is on every host that runs these tests; this one is not. */
	EXPECT_TRUE(fact(&self->m, "command", "exists", "sh", value,
			 sizeof(value)));
	EXPECT_FALSE(fact(&self->m, "command", "exists", "kiln-no-such", value,
			  sizeof(value)));
}

/* ---- reseed --------------------------------------------------------------- */

/* CAP_SYS_ADMIN (bit 21 of CapEff): what RNDADDENTROPY asks of its caller. */
static bool has_sys_admin(void)
{
	char line[256];
	unsigned long long eff = 0;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &eff) == 1)
			break;
	fclose(f);
	return eff & (1ULL << 21);
}

/* One request with b as its payload: 0 (RESULT) or ERROR's errno. */
static int request(struct __test_metadata *_metadata,
		   FIXTURE_DATA(agent) * self, uint16_t type,
		   const struct kiln_buf *b)
{
	int fd = agent_connect(_metadata, self);

	EXPECT_EQ(0, agent_client__send_buf(fd, type, b));
	EXPECT_EQ(0, agent_client__recv(fd, &self->m));
	close(fd);
	return answer(_metadata, self);
}

/*
 * A bad payload is EINVAL whoever runs the agent; a good one is taken
 * (RESULT) by an agent with CAP_SYS_ADMIN, as the guest's init has, and
 * refused with the kernel's EPERM otherwise. On a host with the
 * capability this adds 64 random bytes to the host's own pool: harmless.
 */
TEST_F(agent, reseed)
{
	uint8_t seed[KILN_RESEED_BYTES];
	struct kiln_buf b;
	int fd;

	ASSERT_EQ(0, getentropy(seed, sizeof(seed)));
	kiln_buf__init(&b);
	EXPECT_EQ(EINVAL, request(_metadata, self, KILN_MSG_RESEED, &b));
	ASSERT_EQ(0, kiln_tlv__put_bytes(&b, KILN_T_SEED, seed, 8));
	EXPECT_EQ(EINVAL, request(_metadata, self, KILN_MSG_RESEED, &b));
	kiln_buf__reset(&b);
	ASSERT_EQ(0, kiln_reseed__encode(&b, seed, sizeof(seed)));
	EXPECT_EQ(has_sys_admin() ? 0 : EPERM,
		  request(_metadata, self, KILN_MSG_RESEED, &b));
	/*
	 * With a network: a MAC without T_NET is EINVAL; a whole one is
	 * ENOTSUP here, before the seed: eth0 is the host's (the host
	 * build has no init pid), and nothing of it is touched.
	 */
	ASSERT_EQ(0, kiln_tlv__put_bytes(&b, KILN_T_NET_MAC, seed,
					 KILN_NET_MAC_LEN));
	EXPECT_EQ(EINVAL, request(_metadata, self, KILN_MSG_RESEED, &b));
	kiln_buf__reset(&b);
	ASSERT_EQ(0, kiln_reseed__encode(&b, seed, sizeof(seed)));
	ASSERT_EQ(0, kiln_reseed__encode_net(&b, seed,
					     "10.0.2.15/24,10.0.2.2,1500,"
					     "10.0.2.2"));
	EXPECT_EQ(ENOTSUP, request(_metadata, self, KILN_MSG_RESEED, &b));
	kiln_buf__free(&b);

	/* The agent serves on. */
	fd = agent_connect(_metadata, self);
	ASSERT_EQ(0, agent_client__send(fd, KILN_MSG_FACTS, 0, NULL, 0));
	ASSERT_EQ(0, agent_client__recv(fd, &self->m));
	close(fd);
	EXPECT_EQ(KILN_MSG_RESULT, self->m.type);
}

/* ---- mounts --------------------------------------------------------------- */

/*
 * MOUNTS_DETACH and MOUNTS_ATTACH read their list as the vmm writes it
 * (proto/mounts.h): a bad one is EINVAL either way. Detaching what is
 * not mounted (a plain directory, a path that is not there) is done
 * already; attaching at a path that is a mount point already (/proc
 * here) leaves it alone, and one that is not fails with mount's errno
 * and says which.
 */
TEST_F(agent, mounts)
{
	struct kiln_mount m[2] = {
		{ .tag = "kiln0", .path = "/proc" },
		{ .tag = "kiln1", .path = "/nonexistent/kiln-test" },
	};
	static const uint16_t both[] = { KILN_MSG_MOUNTS_DETACH,
					 KILN_MSG_MOUNTS_ATTACH };
	char msg[256] = "";
	struct kiln_buf b;

	kiln_buf__init(&b);
	ASSERT_EQ(0, kiln_tlv__put_bytes(&b, KILN_T_MOUNT, "x", 1));
	for (unsigned int i = 0; i < ARRAY_SIZE(both); i++)
		EXPECT_EQ(EINVAL, request(_metadata, self, both[i], &b));
	kiln_buf__reset(&b);
	snprintf(m[0].path, sizeof(m[0].path), "%s", self->dir);
	ASSERT_EQ(0, kiln_mounts__encode(&b, m, 2));
	EXPECT_EQ(0, request(_metadata, self, KILN_MSG_MOUNTS_DETACH, &b));
	kiln_buf__reset(&b);
	snprintf(m[0].path, sizeof(m[0].path), "/proc");
	ASSERT_EQ(0, kiln_mounts__encode(&b, m, 1));
	EXPECT_EQ(0, request(_metadata, self, KILN_MSG_MOUNTS_ATTACH, &b));
	kiln_buf__reset(&b);
	snprintf(m[0].path, sizeof(m[0].path), "%s", self->dir);
	ASSERT_EQ(0, kiln_mounts__encode(&b, m, 1));
	EXPECT_NE(0, request(_metadata, self, KILN_MSG_MOUNTS_ATTACH, &b));
	ASSERT_TRUE(agent_msg__str(&self->m, KILN_T_MESSAGE, msg, sizeof(msg)));
	EXPECT_NE(NULL, strstr(msg, self->dir))
	TH_LOG("%s", msg);
	kiln_buf__free(&b);
}

/* ---- malformed input ------------------------------------------------------ */

/* ERROR EPROTO, then the connection closes; the agent serves on. */
TEST_F(agent, malformed_requests)
{
	static const uint8_t cut[] = { 32, 0, 0, 0, 100, 0, 0, 0, '/', 'x' };
	struct agent_exec_result r;
	uint64_t e;
	int fd;

	/* A field longer than the payload. */
	fd = agent_connect(_metadata, self);
	ASSERT_EQ(0, agent_client__send(fd, KILN_MSG_FS_STAT, 0, cut,
					sizeof(cut)));
	ASSERT_EQ(0, agent_client__recv(fd, &self->m));
	EXPECT_EQ(KILN_MSG_ERROR, self->m.type);
	EXPECT_TRUE(agent_msg__u64(&self->m, KILN_T_ERRNO, &e));
	EXPECT_EQ(EPROTO, e);
	EXPECT_EQ(-ECONNRESET, agent_client__recv(fd, &self->m));
	close(fd);

	/* Not a request: an unknown type, a data message. */
	fd = agent_connect(_metadata, self);
	ASSERT_EQ(0, agent_client__send(fd, 999, 0, NULL, 0));
	ASSERT_EQ(0, agent_client__recv(fd, &self->m));
	EXPECT_EQ(EPROTO, answer(_metadata, self));
	close(fd);
	fd = agent_connect(_metadata, self);
	ASSERT_EQ(0, agent_client__send(fd, KILN_MSG_PROC_STDIN, 0, "x", 1));
	ASSERT_EQ(0, agent_client__recv(fd, &self->m));
	EXPECT_EQ(EPROTO, answer(_metadata, self));
	close(fd);

	/* A u64 field of the wrong size. */
	fd = agent_connect(_metadata, self);
	{
		struct kiln_buf b;

		kiln_buf__init(&b);
		kiln_tlv__put_str(&b, KILN_T_ARG, "true");
		kiln_tlv__put_bytes(&b, KILN_T_TIMEOUT_MS, "abc", 3);
		ASSERT_EQ(0,
			  agent_client__send_buf(fd, KILN_MSG_PROC_START, &b));
		kiln_buf__free(&b);
	}
	ASSERT_EQ(0, agent_client__recv(fd, &self->m));
	EXPECT_EQ(EPROTO, answer(_metadata, self));
	close(fd);

	run(_metadata, self, &(struct agent_exec_opts){ .argv = ARGV("true") },
	    &r);
	EXPECT_EQ(0, r.error);
	EXPECT_EQ(0, r.exit_code);
	agent_exec_result__free(&r);
}

/* A T_CMOUNT: destination, type, source (NULL: none), one option. */
static void put_cmount(struct kiln_buf *b, const char *dst, const char *type,
		       const char *src, const char *opt)
{
	size_t mark;

	kiln_tlv__begin(b, KILN_T_CMOUNT, &mark);
	kiln_tlv__put_str(b, KILN_T_PATH, dst);
	kiln_tlv__put_str(b, KILN_T_FSTYPE, type);
	if (src)
		kiln_tlv__put_str(b, KILN_T_SOURCE, src);
	if (opt)
		kiln_tlv__put_str(b, KILN_T_OPTION, opt);
	kiln_tlv__end(b, mark);
}

/*
 * CONTAINER_*: the agent checks every field itself (the host may be
 * anyone), EINVAL naming what is wrong; a good request is ENOTSUP off a
 * VM (the host's cgroups are not the agent's), so nothing here touches
 * the host.
 */
TEST_F(agent, container_requests_checked)
{
	static const struct {
		const char *id, *root, *dst, *type, *src, *why;
	} bad[] = {
		{ NULL, "/r", NULL, NULL, NULL, "needs T_CONTAINER" },
		{ "a/b", "/r", NULL, NULL, NULL, "container id" },
		{ "..", "/r", NULL, NULL, NULL, "container id" },
		{ "c1", NULL, NULL, NULL, NULL,
		  "needs T_CONTAINER and T_PATH" },
		{ "c1", "rel/root", NULL, NULL, NULL, "not an absolute path" },
		{ "c1", "/r", "rel", "tmpfs", NULL, "destination" },
		{ "c1", "/r", "/x", "overlay", NULL, "type" },
		{ "c1", "/r", "/x", "bind", NULL, "absolute source" },
		{ "c1", "/r", "/x", "bind", "rel", "absolute source" },
	};
	char msg[256];
	struct kiln_buf b;

	kiln_buf__init(&b);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		kiln_buf__reset(&b);
		if (bad[i].id)
			kiln_tlv__put_str(&b, KILN_T_CONTAINER, bad[i].id);
		if (bad[i].root)
			kiln_tlv__put_str(&b, KILN_T_PATH, bad[i].root);
		if (bad[i].dst)
			put_cmount(&b, bad[i].dst, bad[i].type, bad[i].src,
				   NULL);
		EXPECT_EQ(EINVAL, request(_metadata, self,
					  KILN_MSG_CONTAINER_CREATE, &b))
		TH_LOG("case %zu", i);
		msg[0] = '\0';
		agent_msg__str(&self->m, KILN_T_MESSAGE, msg, sizeof(msg));
		EXPECT_TRUE(strstr(msg, bad[i].why) != NULL)
		TH_LOG("case %zu: \"%s\"", i, msg);
	}
	kiln_buf__reset(&b);
	kiln_tlv__put_str(&b, KILN_T_CONTAINER, "c1");
	kiln_tlv__put_str(&b, KILN_T_PATH, "/r");
	kiln_tlv__put_str(&b, KILN_T_HOSTNAME, "box");
	put_cmount(&b, "/data", "bind", "/srv", "ro");
	put_cmount(&b, "/tmp", "tmpfs", NULL, "mode=1777");
	EXPECT_EQ(ENOTSUP,
		  request(_metadata, self, KILN_MSG_CONTAINER_CREATE, &b));
	EXPECT_EQ(ENOTSUP,
		  request(_metadata, self, KILN_MSG_CONTAINER_DELETE, &b));
	kiln_buf__reset(&b);
	kiln_tlv__put_str(&b, KILN_T_CONTAINER, "bad id");
	EXPECT_EQ(EINVAL,
		  request(_metadata, self, KILN_MSG_CONTAINER_DELETE, &b));
	kiln_buf__reset(&b);
	EXPECT_EQ(EINVAL,
		  request(_metadata, self, KILN_MSG_CONTAINER_DELETE, &b));
	EXPECT_EQ(ENOTSUP,
		  request(_metadata, self, KILN_MSG_CONTAINER_LIST, &b));
	kiln_buf__free(&b);
}

/* A T_RLIMIT: RLIMIT_* number, soft, hard. */
static void put_rlimit(struct kiln_buf *b, int res, uint64_t soft,
		       uint64_t hard)
{
	size_t mark;

	kiln_tlv__begin(b, KILN_T_RLIMIT, &mark);
	kiln_tlv__put_u64(b, KILN_T_RESOURCE, res);
	kiln_tlv__put_u64(b, KILN_T_SOFT, soft);
	kiln_tlv__put_u64(b, KILN_T_HARD, hard);
	kiln_tlv__end(b, mark);
}

/*
 * PROC_START's container fields outside a container: rlimits and
 * no_new_privs reach the command; bad ones and a container that does
 * not exist are errors before anything runs.
 */
TEST_F(agent, exec_rlimits_and_no_new_privs)
{
	struct agent_exec_result r;
	struct kiln_buf b;

	kiln_buf__init(&b);
	put_rlimit(&b, RLIMIT_NOFILE, 64, 64);
	put_rlimit(&b, RLIMIT_CORE, 0, ~0ULL);
	kiln_tlv__put_u64(&b, KILN_T_NO_NEW_PRIVS, 1);
	run(_metadata, self,
	    &(struct agent_exec_opts){
		    .argv = ARGV("sh", "-c",
				 "ulimit -n; ulimit -H -c; "
				 "grep NoNewPrivs /proc/self/status"),
		    .extra = &b },
	    &r);
	EXPECT_EQ(0, r.error) TH_LOG("%s", r.message);
	EXPECT_STREQ("64\nunlimited\nNoNewPrivs:\t1\n", (char *)r.out);
	agent_exec_result__free(&r);

	kiln_buf__reset(&b);
	put_rlimit(&b, RLIMIT_NOFILE, 65, 64);
	run(_metadata, self,
	    &(struct agent_exec_opts){ .argv = ARGV("true"), .extra = &b }, &r);
	EXPECT_EQ(EINVAL, r.error);
	EXPECT_TRUE(strstr(r.message, "T_RLIMIT") != NULL)
	TH_LOG("%s", r.message);
	agent_exec_result__free(&r);

	kiln_buf__reset(&b);
	put_rlimit(&b, 999, 1, 1);
	run(_metadata, self,
	    &(struct agent_exec_opts){ .argv = ARGV("true"), .extra = &b }, &r);
	EXPECT_EQ(EINVAL, r.error);
	agent_exec_result__free(&r);

	kiln_buf__reset(&b);
	kiln_tlv__put_u64(&b, KILN_T_UID, 0);
	run(_metadata, self,
	    &(struct agent_exec_opts){
		    .argv = ARGV("true"), .user = "root", .extra = &b },
	    &r);
	EXPECT_EQ(EINVAL, r.error);
	EXPECT_STREQ("T_USER and T_UID together", r.message);
	agent_exec_result__free(&r);

	kiln_buf__reset(&b);
	kiln_tlv__put_str(&b, KILN_T_CONTAINER, "kiln-no-such-container");
	run(_metadata, self,
	    &(struct agent_exec_opts){ .argv = ARGV("true"), .extra = &b }, &r);
	EXPECT_EQ(ENOENT, r.error);
	EXPECT_STREQ("no container \"kiln-no-such-container\"", r.message);
	agent_exec_result__free(&r);
	kiln_buf__free(&b);
}

/* Over KILN_FRAME_MAX: closed without a word; the agent serves on. */
TEST_F(agent, oversized_frame_closes)
{
	struct agent_exec_result r;
	struct kiln_frame hdr;
	int fd;

	fd = agent_connect(_metadata, self);
	kiln_frame__pack(&hdr, KILN_MSG_FS_STAT, 0, KILN_FRAME_MAX + 1);
	ASSERT_EQ(0, agent_client__write_all(fd, &hdr, sizeof(hdr)));
	EXPECT_EQ(-ECONNRESET, agent_client__recv(fd, &self->m));
	close(fd);

	run(_metadata, self,
	    &(struct agent_exec_opts){ .argv = ARGV("echo", "still here") },
	    &r);
	EXPECT_STREQ("still here\n", (char *)r.out);
	agent_exec_result__free(&r);
}

TEST_HARNESS_MAIN
