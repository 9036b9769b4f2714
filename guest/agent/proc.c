// SPDX-License-Identifier: GPL-2.0
/*
 * PROC_START: run a command and relay it over the connection.
 *
 * The command runs in a new session (setsid), so its process group and
 * session id are its pid; stdin/stdout/stderr are pipes, or one pseudo
 * terminal that is also its controlling terminal. One poll() loop then
 * moves bytes both ways and never blocks:
 *
 *  - host -> stdin: a PROC_STDIN frame is written to the (non-blocking)
 *    pipe at once; what the pipe does not take is kept in a buffer of its
 *    own, and while it waits the connection is still read, so signals and
 *    resizes get through. A second PROC_STDIN frame arriving then is left
 *    in the receive buffer and the connection is not read any further
 *    until the first is written: at most two frames of stdin are held.
 *  - stdout/stderr -> host: frames go into a small queue sent as the
 *    socket takes them (vsock credit is the host's back-pressure); the
 *    pipes are read only while less than KILN_DATA_CHUNK is queued, so a
 *    host that stops reading stops the command, not the agent.
 *
 * The timeout, a host that goes away before the command ends, and a
 * malformed frame all kill the command's process group and session.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "guest/agent/container.h"
#include "guest/agent/proc.h"
#include "proto/env.h"

/* Output is read from the pipes only while less than this is queued. */
#define OUT_HIGH KILN_DATA_CHUNK
/* After the command exits, how long its output may stay open. */
#define EXIT_GRACE_MS 100
#define DEFAULT_ROWS  24
#define DEFAULT_COLS  80
/* Passes over /proc to kill a session that keeps forking. */
#define KILL_PASSES 16
/* Bytes of a bad variable's name that an error message repeats. */
#define ENV_NAME_SHOWN 64
/*
 * T_USER is looked up in these files directly (fgetpwent, fgetgrent):
 * the agent is static, so getpwnam()'s NSS modules are not available.
 */
#define PASSWD_FILE "/etc/passwd"
#define GROUP_FILE  "/etc/group"
/* A uid that is not a uid: (uid_t)-1, what setuid() cannot take. */
#define NO_UID ((uid_t)-1)

struct proc_req {
	char **argv; /* NULL-terminated, at least one */
	char **envp; /* NULL: the agent's own environment */
	char *cwd;   /* NULL: the agent's */
	uint64_t timeout_ms;
	bool pty;
	bool env_merge; /* T_ENV_MERGE: envp adds to the agent's own */
	struct winsize ws;
	char why[KILN_USER_MAX + 64]; /* a bad entry's or user's error */

	/* T_USER: NULL runs the command as the agent's own user */
	char *user;
	uid_t uid;
	gid_t gid;
	gid_t *groups; /* the primary gid, then /etc/group's for the user */
	size_t ngroups;
	char *user_env[4]; /* HOME=, USER=, LOGNAME=, NULL */
	bool cwd_is_home;  /* cwd is the user's home: failing it is not fatal */
	/* T_CONTAINER, T_UID, T_GID, T_GROUP, T_RLIMIT, T_NO_NEW_PRIVS */
	struct container_exec cx;
};

/* What the child writes to the status pipe when it cannot exec. */
enum exec_stage {
	STAGE_SETUP,
	STAGE_CONTAINER,
	STAGE_USER,
	STAGE_CWD,
	STAGE_EXEC
};

struct exec_failure {
	int stage;
	int err;
};

/* Frames waiting for the socket; data[head..tail) is unsent. */
struct outq {
	uint8_t *data;
	size_t head, tail, cap;
};

struct proc {
	struct conn *c;
	pid_t pid;  /* also its process group and session */
	int pidfd;  /* readable once it exits; -1 after */
	int in_fd;  /* stdin: pipe, or a dup of the pty master; -1: closed */
	int out_fd; /* stdout, or a dup of the pty master; -1 at its end */
	int err_fd; /* stderr; -1 with a pty */
	/*
	 * The pty master, held to the end: its last close hangs the
	 * terminal up, which would SIGHUP a command that merely closed its
	 * fds 0-2 before exiting (cat does).
	 */
	int master;
	bool pty;
	uint8_t veof; /* the terminal's EOF character (^D) */
	bool veof_sent;

	/* stdin the pipe has not taken yet: pend_len bytes of pend_buf */
	uint8_t *pend_buf; /* KILN_FRAME_MAX */
	size_t pend_len;
	bool pend_eof;
	bool pending;
	/* a second PROC_STDIN frame, left in the receive buffer */
	struct frame parked;
	bool has_parked;

	struct outq out;
	bool stderr_first; /* alternates, so neither stream starves */

	int64_t deadline;  /* the timeout, ms on CLOCK_MONOTONIC; 0: none */
	int64_t grace_end; /* EXIT_GRACE_MS after the exit */
	bool exited;
	bool timed_out;
	int status;
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the request --------------------------------------------------- */

static void free_strv(char **v)
{
	if (!v)
		return;
	for (char **s = v; *s; s++)
		free(*s);
	free(v);
}

static void req_free(struct proc_req *r)
{
	free_strv(r->argv);
	free_strv(r->envp);
	free(r->cwd);
	free(r->user);
	free(r->groups);
	for (int i = 0; r->user_env[i]; i++)
		free(r->user_env[i]);
	container__exec_free(&r->cx);
}

/* A C string of wire bytes: -EINVAL if they hold a NUL. */
static int dup_bytes(const uint8_t *v, uint32_t len, char **out)
{
	if (memchr(v, '\0', len))
		return -EINVAL;
	*out = strndup((const char *)v, len);
	return *out ? 0 : -ENOMEM;
}

static int count_tags(const struct frame *f, uint16_t want, size_t *n)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint16_t tag;
	uint32_t len;
	int ret;

	*n = 0;
	kiln_tlv__iter(&it, f->data, f->len);
	while ((ret = kiln_tlv__next(&it, &tag, &val, &len)) > 0)
		*n += tag == want;
	return ret;
}

static int parse_u16(const uint8_t *val, uint32_t len, unsigned short *out)
{
	uint64_t v;

	if (kiln_tlv__u64(val, len, &v))
		return -EPROTO;
	if (v > 0xffff)
		return -EINVAL;
	*out = v;
	return 0;
}

/* One T_ENV entry, "NAME=value" (proto/env.h); a bad one is named. */
static int parse_env(const uint8_t *val, uint32_t len, struct proc_req *r,
		     char **out, const char **why)
{
	const char *entry = (const char *)val, *bad;
	char name[ENV_NAME_SHOWN + 1];

	bad = kiln_env__entry_error(entry, len);
	if (!bad)
		return dup_bytes(val, len, out);
	kiln_env__show(entry, kiln_env__name_len(entry, len), name,
		       sizeof(name));
	snprintf(r->why, sizeof(r->why), "environment variable \"%s\": %s",
		 name, bad);
	*why = r->why;
	return -EINVAL;
}

static int parse_req(const struct frame *f, struct proc_req *r,
		     const char **why)
{
	size_t nargs, nenv, ia = 0, ie = 0;
	struct kiln_tlv_iter it;
	const uint8_t *val;
	uint64_t v;
	uint16_t tag;
	uint32_t len;
	int ret;

	*r = (struct proc_req){ .ws = { .ws_row = DEFAULT_ROWS,
					.ws_col = DEFAULT_COLS } };
	container__exec_init(&r->cx);
	*why = "malformed PROC_START";
	if (count_tags(f, KILN_T_ARG, &nargs) < 0 ||
	    count_tags(f, KILN_T_ENV, &nenv) < 0)
		return -EPROTO;
	if (!nargs) {
		*why = "PROC_START without T_ARG";
		return -EPROTO;
	}
	r->argv = calloc(nargs + 1, sizeof(*r->argv));
	if (nenv)
		r->envp = calloc(nenv + 1, sizeof(*r->envp));
	if (!r->argv || (nenv && !r->envp))
		return -ENOMEM;

	kiln_tlv__iter(&it, f->data, f->len);
	while (kiln_tlv__next(&it, &tag, &val, &len) > 0) {
		ret = 0;
		switch (tag) {
		case KILN_T_ARG:
			*why = "an argument holds a NUL byte";
			ret = dup_bytes(val, len, &r->argv[ia++]);
			break;
		case KILN_T_ENV:
			ret = parse_env(val, len, r, &r->envp[ie++], why);
			break;
		case KILN_T_ENV_MERGE:
			*why = "malformed T_ENV_MERGE";
			ret = kiln_tlv__u64(val, len, &v);
			if (!ret && v > 1)
				ret = -EINVAL;
			r->env_merge = v == 1;
			break;
		case KILN_T_USER:
			*why = "T_USER is not a user name or uid";
			free(r->user);
			r->user = NULL;
			if (!len || len > KILN_USER_MAX)
				ret = -EINVAL;
			else
				ret = dup_bytes(val, len, &r->user);
			break;
		case KILN_T_CWD:
			*why = "the working directory holds a NUL byte";
			free(r->cwd);
			ret = dup_bytes(val, len, &r->cwd);
			break;
		case KILN_T_TIMEOUT_MS:
			*why = "malformed T_TIMEOUT_MS";
			ret = kiln_tlv__u64(val, len, &r->timeout_ms);
			break;
		case KILN_T_PTY:
			*why = "malformed T_PTY";
			ret = kiln_tlv__u64(val, len, &v);
			r->pty = v != 0;
			break;
		case KILN_T_ROWS:
			*why = "T_ROWS is not a terminal size";
			ret = parse_u16(val, len, &r->ws.ws_row);
			break;
		case KILN_T_COLS:
			*why = "T_COLS is not a terminal size";
			ret = parse_u16(val, len, &r->ws.ws_col);
			break;
		default:
			ret = container__exec_field(&r->cx, tag, val, len, why);
			if (ret > 0)
				ret = 0;
			break;
		}
		if (ret)
			return ret;
	}
	*why = "T_USER and T_UID together";
	if (r->user && r->cx.has_ids)
		return -EINVAL;
	*why = NULL;
	return 0;
}

/* ---- starting the command ----------------------------------------- */

static bool env_has_path(char **envp)
{
	for (; *envp; envp++)
		if (!strncmp(*envp, "PATH=", 5))
			return true;
	return false;
}

/* Does @add set the variable @entry ("NAME=value") sets? */
static bool env_overridden(const char *entry, char *const *add)
{
	size_t n = strcspn(entry, "=");

	for (; *add; add++)
		if (!strncmp(*add, entry, n) && (*add)[n] == '=')
			return true;
	return false;
}

/*
 * The command's environment when it is not T_ENV alone: the agent's own
 * (init's PATH, HOME, TERM and the image's /etc/environment:
 * guest/init/env.h), then T_USER's HOME, USER and LOGNAME, then with
 * T_ENV_MERGE the request's entries; each replaces a variable of the
 * same name before it. Into r->envp (copies: req_free() frees them all).
 */
static int merge_env(struct proc_req *r)
{
	char *none[] = { NULL };
	char **add = r->envp ? r->envp : none;
	char **user = r->user ? r->user_env : none;
	size_t n_own = 0, n_user = 0, n_add = 0, i = 0;
	char **merged;

	if (r->envp ? !r->env_merge : !r->user)
		return 0;
	while (environ && environ[n_own])
		n_own++;
	while (user[n_user])
		n_user++;
	while (add[n_add])
		n_add++;
	merged = calloc(n_own + n_user + n_add + 1, sizeof(*merged));
	if (!merged)
		return -ENOMEM;
	for (size_t j = 0; j < n_own + n_user; j++) {
		char *e = j < n_own ? environ[j] : user[j - n_own];

		if (env_overridden(e, add) ||
		    (j < n_own && env_overridden(e, user)))
			continue;
		merged[i] = strdup(e);
		if (!merged[i++]) {
			free_strv(merged);
			return -ENOMEM;
		}
	}
	memcpy(merged + i, add, n_add * sizeof(*merged));
	free(r->envp); /* its strings are in merged now */
	r->envp = merged;
	return 0;
}

/* ---- T_USER --------------------------------------------------------- */

/* A decimal uid, as T_USER may give one. */
static bool parse_uid(const char *s, uid_t *out)
{
	unsigned long long v = 0;

	if (!*s)
		return false;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return false;
		v = v * 10 + (*s - '0');
		if (v >= NO_UID)
			return false;
	}
	*out = v;
	return true;
}

/*
 * The passwd entry of @want: the one of that name, else (a decimal
 * @want) the first with that uid. Its fields are copied into @r.
 */
static int find_passwd(struct proc_req *r, const char *want)
{
	struct passwd *pw;
	uid_t uid;
	FILE *f;
	int ret = 0;

	f = fopen(PASSWD_FILE, "re");
	if (!f)
		return -errno;
	while ((pw = fgetpwent(f)) && strcmp(pw->pw_name, want))
		;
	if (!pw && parse_uid(want, &uid)) {
		rewind(f);
		while ((pw = fgetpwent(f)) && pw->pw_uid != uid)
			;
	}
	if (!pw) {
		fclose(f);
		return -ENOENT;
	}
	r->uid = pw->pw_uid;
	r->gid = pw->pw_gid;
	if (asprintf(&r->user_env[0], "HOME=%s", pw->pw_dir) < 0 ||
	    asprintf(&r->user_env[1], "USER=%s", pw->pw_name) < 0 ||
	    asprintf(&r->user_env[2], "LOGNAME=%s", pw->pw_name) < 0)
		ret = -ENOMEM;
	fclose(f);
	return ret;
}

/* Is @name among a group's members (NULL-terminated)? */
static bool group_has(char **members, const char *name)
{
	for (; *members; members++)
		if (!strcmp(*members, name))
			return true;
	return false;
}

/*
 * The user's groups, as initgroups() would set them from files: the
 * primary gid, then every group of /etc/group that lists the user (no
 * /etc/group: the primary alone), at most NGROUPS_MAX.
 */
static int find_groups(struct proc_req *r)
{
	const char *name = r->user_env[1] + strlen("USER=");
	long max = sysconf(_SC_NGROUPS_MAX);
	struct group *g;
	gid_t *more;
	FILE *f;

	r->groups = malloc(sizeof(*r->groups));
	if (!r->groups)
		return -ENOMEM;
	r->groups[r->ngroups++] = r->gid;
	f = fopen(GROUP_FILE, "re");
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	while ((g = fgetgrent(f)) && (long)r->ngroups < max) {
		if (g->gr_gid == r->gid || !group_has(g->gr_mem, name))
			continue;
		more = reallocarray(r->groups, r->ngroups + 1,
				    sizeof(*r->groups));
		if (!more) {
			fclose(f);
			return -ENOMEM;
		}
		r->groups = more;
		r->groups[r->ngroups++] = g->gr_gid;
	}
	fclose(f);
	return 0;
}

/*
 * T_USER resolved before the fork, so that an unknown user is an ERROR
 * naming it (ENOENT with T_USER) rather than a child that cannot exec.
 * Sends the ERROR itself; 0 or a negative errno.
 */
static int resolve_user(struct conn *c, struct proc_req *r)
{
	char shown[KILN_USER_MAX + 1];
	struct kiln_buf b;
	int ret;

	if (!r->user)
		return 0;
	ret = find_passwd(r, r->user);
	if (!ret)
		ret = find_groups(r);
	if (!ret)
		return 0;
	kiln_env__show(r->user, strlen(r->user), shown, sizeof(shown));
	if (ret == -ENOENT)
		snprintf(r->why, sizeof(r->why),
			 "no user \"%s\" in the guest's " PASSWD_FILE, shown);
	else
		snprintf(r->why, sizeof(r->why),
			 "cannot look up user \"%s\": %s", shown,
			 strerror(-ret));
	kiln_buf__init(&b);
	if (!conn__error_payload(&b, -ret, r->why) &&
	    (ret != -ENOENT || !kiln_tlv__put_str(&b, KILN_T_USER, r->user)))
		conn__send_buf(c, KILN_MSG_ERROR, &b);
	kiln_buf__free(&b);
	return ret;
}

/*
 * In the child: the user's groups, gid and uid, in that order (setuid
 * last: it takes the right to change the others). An agent that is not
 * root (kiln-agent-host in the tests) can only be itself: nothing to do.
 */
static int become_user(const struct proc_req *r)
{
	if (geteuid() && r->uid == geteuid() && r->gid == getegid())
		return 0;
	if (setgroups(r->ngroups, r->groups) || setgid(r->gid) ||
	    setuid(r->uid))
		return -1;
	return 0;
}

/*
 * In the child, until exec: its own session and group, fds 0-2, the
 * directory, default signal handling. A failure goes up the status pipe.
 */
static void __attribute__((noreturn))
exec_child(const struct proc_req *r, const int fds[3], int master,
	   int status_fd)
{
	struct exec_failure fail = { .stage = STAGE_SETUP };
	int tty_fds[3];
	sigset_t none;
	int tty, i;

	/* The agent ignores SIGPIPE, init ignores SIGTTOU: none of that. */
	for (i = 1; i < NSIG; i++)
		signal(i, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (setsid() < 0)
		goto fail;
	if (master >= 0) {
		/* The master's own peer: no path, so no lookup can land in
		 * another devpts instance (a container has its own). */
		tty = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
		if (tty < 0 || ioctl(tty, TIOCSCTTY, 0))
			goto fail;
		/* The user's terminal: theirs to set modes on and reopen. */
		if ((r->user || r->cx.has_ids) &&
		    fchown(tty, r->user ? r->uid : r->cx.uid, NO_UID))
			goto fail;
		tty_fds[0] = tty_fds[1] = tty_fds[2] = tty;
		fds = tty_fds;
	}
	/* The agent keeps 0-2 open, so none of fds[] is below 3. */
	for (i = 0; i < 3; i++)
		if (dup2(fds[i], i) < 0)
			goto fail;
	fail.stage = STAGE_CONTAINER;
	if (container__exec_enter(&r->cx))
		goto fail;
	fail.stage = STAGE_USER;
	if ((r->user && become_user(r)) || container__exec_identity(&r->cx))
		goto fail;
	/* A home that is gone or shut: "/", as login(1) does. */
	fail.stage = STAGE_CWD;
	if (r->cwd && chdir(r->cwd) && (!r->cwd_is_home || chdir("/")))
		goto fail;
	fail.stage = STAGE_EXEC;
	if (!r->envp) {
		execvp(r->argv[0], r->argv);
	} else {
		/*
		 * execvpe() searches the caller's PATH: the command's own if
		 * it has one, else the agent's.
		 */
		if (env_has_path(r->envp))
			environ = r->envp;
		execvpe(r->argv[0], r->argv, r->envp);
	}
fail:
	fail.err = errno;
	if (write(status_fd, &fail, sizeof(fail)) < 0)
		_exit(126);
	_exit(127);
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK))
		return -errno;
	return 0;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/*
 * A pseudo terminal, the master in @master: from the container's devpts
 * in a container (its /dev/pts/N is the process's terminal), else from
 * the guest's. The child opens the slave from the master.
 */
static int open_pty(const struct proc_req *r, int *master, uint8_t *veof)
{
	struct termios t;
	int fd, err;

	fd = container__open_ptmx(&r->cx);
	if (fd < 0)
		return fd;
	if (unlockpt(fd) || ioctl(fd, TIOCSWINSZ, &r->ws)) {
		err = errno;
		close(fd);
		return -err;
	}
	/* On a master, TCGETS reads the slave's settings. */
	*veof = tcgetattr(fd, &t) ? 4 : t.c_cc[VEOF];
	*master = fd;
	return 0;
}

/* Both ends of the pipes: [0] read, [1] write; -1 when unused. */
struct stdio_pipes {
	int in[2], out[2], err[2];
};

static void close_pipes(struct stdio_pipes *sp)
{
	for (int i = 0; i < 2; i++) {
		close_fd(&sp->in[i]);
		close_fd(&sp->out[i]);
		close_fd(&sp->err[i]);
	}
}

static int open_pipes(struct stdio_pipes *sp)
{
	if (pipe2(sp->in, O_CLOEXEC) || pipe2(sp->out, O_CLOEXEC) ||
	    pipe2(sp->err, O_CLOEXEC))
		return -errno;
	return 0;
}

static const char *stage_what(int stage)
{
	switch (stage) {
	case STAGE_CONTAINER:
		return "cannot enter the container";
	case STAGE_USER:
		return "cannot run as user";
	case STAGE_CWD:
		return "cannot change to the working directory";
	case STAGE_EXEC:
		return "cannot execute";
	default:
		return "cannot set up the process";
	}
}

/*
 * The child's report: ERROR with the errno and a message naming the
 * directory or the command; with T_CWD too when the working directory
 * failed, which tells the host that ENOENT from the command (proto/agent.h).
 */
static void exec_failed(struct conn *c, const struct proc_req *r,
			const struct exec_failure *fail)
{
	struct kiln_buf b;
	char msg[512];
	int ret;

	snprintf(msg, sizeof(msg), "%s %s: %s", stage_what(fail->stage),
		 fail->stage == STAGE_CWD		    ? r->cwd :
		 fail->stage == STAGE_USER && r->user	    ? r->user :
		 fail->stage == STAGE_USER		    ? "(uid, gid)" :
		 fail->stage == STAGE_CONTAINER && r->cx.id ? r->cx.id :
		 fail->stage == STAGE_CONTAINER		    ? "(rlimits)" :
							      r->argv[0],
		 strerror(fail->err));
	kiln_buf__init(&b);
	ret = conn__error_payload(&b, fail->err, msg);
	if (!ret && fail->stage == STAGE_CWD)
		ret = kiln_tlv__put_str(&b, KILN_T_CWD, r->cwd);
	if (!ret)
		conn__send_buf(c, KILN_MSG_ERROR, &b);
	kiln_buf__free(&b);
}

/*
 * Forks and execs; on success fills @p's fds and pid and returns 0. On
 * failure the ERROR has been sent and a negative value is returned.
 */
static int spawn(struct proc *p, const struct proc_req *r)
{
	struct stdio_pipes sp = { { -1, -1 }, { -1, -1 }, { -1, -1 } };
	int status[2] = { -1, -1 }, master = -1, fds[3], err;
	struct exec_failure fail;
	ssize_t n;
	pid_t pid;

	err = r->pty ? open_pty(r, &master, &p->veof) : open_pipes(&sp);
	if (err) {
		conn__error(p->c, -err, "cannot create the %s: %s",
			    r->pty ? "terminal" : "pipes", strerror(-err));
		goto out_close;
	}
	if (pipe2(status, O_CLOEXEC)) {
		err = -errno;
		conn__error(p->c, -err, "cannot create a pipe: %s",
			    strerror(-err));
		goto out_close;
	}
	fds[0] = sp.in[0];
	fds[1] = sp.out[1];
	fds[2] = sp.err[1];
	pid = fork();
	if (pid == 0)
		exec_child(r, fds, master, status[1]);
	if (pid < 0) {
		err = -errno;
		conn__error(p->c, -err, "cannot fork: %s", strerror(-err));
		goto out_close;
	}
	close_fd(&status[1]);
	do
		n = read(status[0], &fail, sizeof(fail));
	while (n < 0 && errno == EINTR);
	if (n == sizeof(fail)) {
		waitpid(pid, NULL, 0);
		err = -fail.err;
		exec_failed(p->c, r, &fail);
		goto out_close;
	}

	p->pid = pid;
	p->pidfd = pidfd_open(pid, 0);
	if (p->pty) {
		p->master = master;
		p->out_fd = fcntl(master, F_DUPFD_CLOEXEC, 3);
		p->in_fd = fcntl(master, F_DUPFD_CLOEXEC, 3);
		master = -1;
	} else {
		p->in_fd = sp.in[1];
		p->out_fd = sp.out[0];
		p->err_fd = sp.err[0];
		sp.in[1] = sp.out[0] = sp.err[0] = -1;
	}
	if (p->pidfd < 0 || p->in_fd < 0 || p->out_fd < 0 ||
	    set_nonblock(p->in_fd) || set_nonblock(p->out_fd) ||
	    (p->err_fd >= 0 && set_nonblock(p->err_fd))) {
		err = -errno;
		kill(-pid, SIGKILL);
		waitpid(pid, NULL, 0);
		conn__error(p->c, -err, "cannot watch the process: %s",
			    strerror(-err));
		goto out_close;
	}
	err = 0;
out_close:
	close_pipes(&sp);
	close_fd(&status[0]);
	close_fd(&status[1]);
	close_fd(&master);
	return err;
}

/* ---- killing ------------------------------------------------------- */

/*
 * The session id of process @pid (a /proc entry name) from its stat file,
 * or -1; zombies count as gone (-1): they only wait to be reaped.
 */
static pid_t live_session_of(const char *pid)
{
	char path[64], buf[512], *s, state;
	int sid = -1, fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* The name (field 2) may hold anything, ")" included. */
	s = strrchr(buf, ')');
	if (!s || sscanf(s + 1, " %c %*d %*d %d", &state, &sid) != 2)
		return -1;
	return state == 'Z' || state == 'X' ? -1 : sid;
}

/* SIGKILLs every live process of session @sid; returns how many. */
static int kill_session_once(pid_t sid)
{
	struct dirent *d;
	int found = 0;
	DIR *dir;

	dir = opendir("/proc");
	if (!dir)
		return 0;
	while ((d = readdir(dir))) {
		if (d->d_name[0] < '1' || d->d_name[0] > '9')
			continue;
		if (live_session_of(d->d_name) != sid)
			continue;
		if (!kill(atoi(d->d_name), SIGKILL))
			found++;
	}
	closedir(dir);
	return found;
}

/*
 * The process group first (one system call, atomic against its forks),
 * then anything of the session in other groups, such as the jobs of an
 * interactive shell, until a pass over /proc finds no one left alive.
 * Bounded: a process stuck in the kernel (D state) stays "alive".
 */
static void kill_command(struct proc *p)
{
	struct timespec tick = { .tv_nsec = 1000 * 1000 };

	kill(-p->pid, SIGKILL);
	for (int i = 0; i < KILL_PASSES; i++) {
		if (!kill_session_once(p->pid))
			break;
		nanosleep(&tick, NULL);
	}
}

/* ---- the output queue ---------------------------------------------- */

static size_t outq_len(const struct outq *q)
{
	return q->tail - q->head;
}

static int outq_reserve(struct outq *q, size_t n)
{
	size_t cap;
	uint8_t *d;

	if (q->head == q->tail)
		q->head = q->tail = 0;
	if (q->tail + n <= q->cap)
		return 0;
	if (q->head) {
		memmove(q->data, q->data + q->head, q->tail - q->head);
		q->tail -= q->head;
		q->head = 0;
		if (q->tail + n <= q->cap)
			return 0;
	}
	cap = q->cap ? q->cap :
		       4 * (KILN_DATA_CHUNK + sizeof(struct kiln_frame));
	while (cap < q->tail + n)
		cap *= 2;
	d = realloc(q->data, cap);
	if (!d)
		return -ENOMEM;
	q->data = d;
	q->cap = cap;
	return 0;
}

static int outq_frame(struct outq *q, uint16_t type, const void *p, size_t len)
{
	struct kiln_frame hdr;
	int ret;

	ret = outq_reserve(q, sizeof(hdr) + len);
	if (ret)
		return ret;
	kiln_frame__pack(&hdr, type, 0, len);
	memcpy(q->data + q->tail, &hdr, sizeof(hdr));
	if (len)
		memcpy(q->data + q->tail + sizeof(hdr), p, len);
	q->tail += sizeof(hdr) + len;
	return 0;
}

/* Sends what the socket takes now; -errno once the host is gone. */
static int outq_send(struct outq *q, int fd)
{
	ssize_t n;

	while (outq_len(q)) {
		n = send(fd, q->data + q->head, outq_len(q),
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			q->head += n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		return n < 0 ? -errno : -EPIPE;
	}
	q->head = q->tail = 0;
	return 0;
}

/*
 * One read of the command's output into a frame. End of file, and EIO
 * (a pty master once no slave is open), close the stream.
 */
static void read_output(struct proc *p, int *fd, uint16_t type, size_t max)
{
	struct kiln_frame hdr;
	struct outq *q = &p->out;
	ssize_t n;

	if (outq_reserve(q, sizeof(hdr) + max))
		return; /* out of memory: try again on the next round */
	do
		n = read(*fd, q->data + q->tail + sizeof(hdr), max);
	while (n < 0 && errno == EINTR);
	if (n > 0) {
		kiln_frame__pack(&hdr, type, 0, n);
		memcpy(q->data + q->tail, &hdr, sizeof(hdr));
		q->tail += sizeof(hdr) + n;
		return;
	}
	if (n < 0 && errno == EAGAIN)
		return;
	close_fd(fd);
}

/*
 * The grace period is over and something still holds the output open:
 * take what is in it now (the command's last words), then let go.
 */
static void drain_output(struct proc *p, int *fd, uint16_t type)
{
	int avail;

	if (*fd < 0)
		return;
	if (!ioctl(*fd, FIONREAD, &avail)) {
		while (avail > 0 && *fd >= 0) {
			size_t before = outq_len(&p->out);

			read_output(p, fd, type,
				    avail < (int)KILN_DATA_CHUNK ?
					    (size_t)avail :
					    KILN_DATA_CHUNK);
			if (outq_len(&p->out) == before)
				break;
			avail -= outq_len(&p->out) - before -
				 sizeof(struct kiln_frame);
		}
	}
	close_fd(fd);
}

static void read_outputs(struct proc *p, const struct pollfd *po,
			 const struct pollfd *pe)
{
	bool out_ready = po->revents && p->out_fd >= 0;
	bool err_ready = pe->revents && p->err_fd >= 0;

	if (err_ready && p->stderr_first)
		read_output(p, &p->err_fd, KILN_MSG_PROC_STDERR,
			    KILN_DATA_CHUNK);
	if (out_ready && outq_len(&p->out) < OUT_HIGH)
		read_output(p, &p->out_fd, KILN_MSG_PROC_STDOUT,
			    KILN_DATA_CHUNK);
	if (err_ready && !p->stderr_first && outq_len(&p->out) < OUT_HIGH)
		read_output(p, &p->err_fd, KILN_MSG_PROC_STDERR,
			    KILN_DATA_CHUNK);
	p->stderr_first = !p->stderr_first;
}

/* ---- stdin --------------------------------------------------------- */

static void stdin_close(struct proc *p)
{
	close_fd(&p->in_fd);
	p->pending = false;
	p->has_parked = false; /* dropped: there is nowhere to write it */
}

static void stdin_write(struct proc *p, const uint8_t *data, size_t len,
			bool eof);

/*
 * After the last chunk: a pipe is closed; a terminal gets its EOF
 * character (the pty stays open: closing the master would hang it up).
 */
static void stdin_chunk_done(struct proc *p, bool eof)
{
	if (!eof)
		return;
	if (p->pty && !p->veof_sent) {
		p->veof_sent = true;
		stdin_write(p, &p->veof, 1, true);
		return;
	}
	stdin_close(p);
}

static void stdin_write(struct proc *p, const uint8_t *data, size_t len,
			bool eof)
{
	ssize_t n;

	while (len) {
		n = write(p->in_fd, data, len);
		if (n > 0) {
			data += n;
			len -= n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		/* EPIPE: nobody reads stdin any more; drop the rest. */
		stdin_close(p);
		return;
	}
	if (len) {
		memmove(p->pend_buf, data, len);
		p->pend_len = len;
		p->pend_eof = eof;
		p->pending = true;
		return;
	}
	stdin_chunk_done(p, eof);
}

/* A PROC_STDIN frame from the host. */
static void stdin_frame(struct proc *p, const struct frame *f)
{
	if (p->in_fd < 0)
		return; /* closed: stdin after its end is dropped */
	if (p->pending) {
		p->parked = *f;
		p->has_parked = true;
		return;
	}
	stdin_write(p, f->data, f->len, f->flags & KILN_F_EOF);
}

/* The pipe has room again. */
static void stdin_flush(struct proc *p)
{
	struct frame f;

	if (!p->pending)
		return;
	p->pending = false;
	stdin_write(p, p->pend_buf, p->pend_len, p->pend_eof);
	if (p->pending || !p->has_parked)
		return;
	f = p->parked;
	p->has_parked = false;
	stdin_frame(p, &f);
}

/* ---- frames from the host ------------------------------------------ */

static int frame_u64(const struct frame *f, uint16_t want, uint64_t *out)
{
	struct kiln_tlv_iter it;
	const uint8_t *val;
	bool found = false;
	uint16_t tag;
	uint32_t len;
	int ret;

	kiln_tlv__iter(&it, f->data, f->len);
	while ((ret = kiln_tlv__next(&it, &tag, &val, &len)) > 0) {
		if (tag != want)
			continue;
		if (kiln_tlv__u64(val, len, out))
			return -EPROTO;
		found = true;
	}
	if (ret < 0 || !found)
		return -EPROTO;
	return 0;
}

static int signal_frame(struct proc *p, const struct frame *f, const char **why)
{
	uint64_t sig;

	*why = "PROC_SIGNAL without a valid T_SIGNAL";
	if (frame_u64(f, KILN_T_SIGNAL, &sig))
		return -EPROTO;
	*why = "no such signal";
	if (sig < 1 || sig >= NSIG)
		return -EINVAL;
	/* ESRCH: the group is gone already; nothing to tell. */
	kill(-p->pid, sig);
	return 0;
}

/* TIOCSWINSZ on the master: the kernel sends SIGWINCH to the foreground. */
static int resize_frame(struct proc *p, const struct frame *f, const char **why)
{
	uint64_t rows, cols;
	struct winsize ws;

	*why = "PROC_RESIZE without valid T_ROWS and T_COLS";
	if (frame_u64(f, KILN_T_ROWS, &rows) ||
	    frame_u64(f, KILN_T_COLS, &cols))
		return -EPROTO;
	*why = "not a terminal size";
	if (rows > 0xffff || cols > 0xffff)
		return -EINVAL;
	if (p->master < 0)
		return 0; /* no terminal: nothing to resize */
	ws = (struct winsize){ .ws_row = rows, .ws_col = cols };
	ioctl(p->master, TIOCSWINSZ, &ws);
	return 0;
}

static int handle_frame(struct proc *p, const struct frame *f, const char **why)
{
	switch (f->type) {
	case KILN_MSG_PROC_STDIN:
		stdin_frame(p, f);
		return 0;
	case KILN_MSG_PROC_SIGNAL:
		return signal_frame(p, f, why);
	case KILN_MSG_PROC_RESIZE:
		return resize_frame(p, f, why);
	default:
		*why = "not a message for a running process";
		return -EPROTO;
	}
}

/*
 * Reads frames while there are any and stdin has room for them. Returns
 * 0, -ECONNRESET (or another -errno) when the host is gone, or the error
 * of a frame that is not acceptable (with @why).
 */
static int read_frames(struct proc *p, const char **why)
{
	struct frame f;
	int ret;

	*why = NULL;
	while (!p->has_parked) {
		ret = conn__recv_some(p->c, &f);
		if (ret <= 0)
			return ret;
		ret = handle_frame(p, &f, why);
		if (ret)
			return ret;
	}
	return 0;
}

/* ---- the loop ------------------------------------------------------- */

static void reap(struct proc *p)
{
	int st;

	if (waitpid(p->pid, &st, WNOHANG) != p->pid)
		return;
	p->exited = true;
	p->status = st;
	close_fd(&p->pidfd);
	p->grace_end = now_ms() + EXIT_GRACE_MS;
	/* stdin was the command's: whatever is left goes nowhere. */
	stdin_close(p);
}

static int poll_timeout(const struct proc *p)
{
	int64_t until, left;

	if (p->exited)
		until = p->grace_end;
	else if (p->deadline && !p->timed_out)
		until = p->deadline;
	else
		return -1;
	left = until - now_ms();
	return left < 0 ? 0 : left > 60000 ? 60000 : (int)left;
}

/* The host left (or reset): the command must not outlive the request. */
static void host_gone(struct proc *p)
{
	if (!p->exited) {
		kill_command(p);
		waitpid(p->pid, NULL, 0);
	}
}

/* An ERROR after whatever output is queued: the connection's last word. */
static void queue_error(struct proc *p, int err, const char *why)
{
	struct kiln_buf b;

	kiln_buf__init(&b);
	if (!conn__error_payload(&b, err, why))
		outq_frame(&p->out, KILN_MSG_ERROR, b.data, b.len);
	kiln_buf__free(&b);
}

enum { PFD_SOCK, PFD_PID, PFD_OUT, PFD_ERR, PFD_IN, NR_PFD };

/*
 * Runs until the command has exited and its output ended (or its grace
 * period did). Returns 0, or negative when the connection is over
 * (the host left, or a bad frame: then the ERROR is queued).
 */
static int relay(struct proc *p)
{
	struct pollfd pfd[NR_PFD];
	bool room, want_in;
	const char *why;
	int ret, n;

	for (;;) {
		if (!p->exited && p->deadline && !p->timed_out &&
		    now_ms() >= p->deadline) {
			p->timed_out = true;
			kill_command(p);
		}
		if (p->exited && now_ms() >= p->grace_end) {
			drain_output(p, &p->out_fd, KILN_MSG_PROC_STDOUT);
			drain_output(p, &p->err_fd, KILN_MSG_PROC_STDERR);
		}
		if (p->exited && p->out_fd < 0 && p->err_fd < 0)
			return 0;

		room = outq_len(&p->out) < OUT_HIGH;
		want_in = !p->has_parked;
		/*
		 * POLLRDHUP even when not reading: a vsock peer that closes
		 * with data still unread here raises only that.
		 */
		pfd[PFD_SOCK] = (struct pollfd){
			.fd = p->c->fd,
			.events = POLLRDHUP | (want_in ? POLLIN : 0) |
				  (outq_len(&p->out) ? POLLOUT : 0),
		};
		pfd[PFD_PID] =
			(struct pollfd){ .fd = p->pidfd, .events = POLLIN };
		pfd[PFD_OUT] = (struct pollfd){ .fd = room ? p->out_fd : -1,
						.events = POLLIN };
		pfd[PFD_ERR] = (struct pollfd){ .fd = room ? p->err_fd : -1,
						.events = POLLIN };
		pfd[PFD_IN] = (struct pollfd){
			.fd = p->pending ? p->in_fd : -1,
			.events = POLLOUT,
		};
		n = poll(pfd, NR_PFD, poll_timeout(p));
		if (n < 0 && errno != EINTR) {
			ret = -errno; /* not expected: give up the request */
			goto out_gone;
		}
		if (n <= 0)
			continue;

		if (pfd[PFD_SOCK].revents & (POLLOUT | POLLERR | POLLHUP)) {
			ret = outq_send(&p->out, p->c->fd);
			if (ret)
				goto out_gone;
		}
		if (pfd[PFD_SOCK].revents & (POLLERR | POLLHUP | POLLRDHUP) &&
		    !want_in) {
			/* Not reading, yet hung up: the host is gone. */
			ret = -ECONNRESET;
			goto out_gone;
		}
		if (pfd[PFD_SOCK].revents &
			    (POLLIN | POLLERR | POLLHUP | POLLRDHUP) &&
		    want_in) {
			ret = read_frames(p, &why);
			if (ret == -EPROTO || ret == -EINVAL)
				goto out_bad_frame;
			if (ret)
				goto out_gone;
		}
		if (pfd[PFD_PID].revents)
			reap(p);
		if (pfd[PFD_IN].revents)
			stdin_flush(p);
		read_outputs(p, &pfd[PFD_OUT], &pfd[PFD_ERR]);
	}

out_bad_frame:
	/* The connection ends with the ERROR: as if the host had left. */
	host_gone(p);
	queue_error(p, -ret, why);
	return ret;
out_gone:
	host_gone(p);
	return ret;
}

/*
 * Sends the rest of the queue, reading (and dropping) whatever the host
 * still sends meanwhile so that a host blocked writing stdin cannot
 * deadlock against us.
 */
static void flush_out(struct proc *p)
{
	struct pollfd pfd = { .fd = p->c->fd, .events = POLLIN | POLLOUT };
	ssize_t n;

	while (outq_len(&p->out)) {
		if (poll(&pfd, 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (pfd.revents & POLLIN) {
			n = recv(p->c->fd, p->c->in, KILN_FRAME_MAX,
				 MSG_DONTWAIT);
			if (n == 0 ||
			    (n < 0 && errno != EAGAIN && errno != EINTR))
				return;
		}
		if (pfd.revents & (POLLOUT | POLLERR | POLLHUP) &&
		    outq_send(&p->out, p->c->fd))
			return;
	}
}

static int exit_payload(const struct proc *p, struct kiln_buf *b)
{
	int st = p->status, code, ret;

	code = proc__exit_code(st);
	if (p->timed_out)
		code = 124;
	ret = kiln_tlv__put_u64(b, KILN_T_EXIT_CODE, code);
	if (!ret && WIFSIGNALED(st))
		ret = kiln_tlv__put_u64(b, KILN_T_SIGNAL, WTERMSIG(st));
	if (!ret)
		ret = kiln_tlv__put_u64(b, KILN_T_TIMED_OUT, p->timed_out);
	return ret;
}

void proc__start(struct conn *c, const struct frame *f, const char *default_cwd)
{
	struct proc p = { .c = c,
			  .pidfd = -1,
			  .in_fd = -1,
			  .out_fd = -1,
			  .err_fd = -1,
			  .master = -1 };
	struct proc_req r;
	const char *why;
	struct kiln_buf b;
	int ret;

	kiln_buf__init(&b);
	ret = parse_req(f, &r, &why);
	if (!ret && resolve_user(c, &r))
		goto out;
	if (!ret)
		ret = merge_env(&r);
	if (!ret && !r.cwd && r.cx.id) {
		/* Inside a container: its root, not the boot's cwd. */
		r.cwd = strdup("/");
		ret = r.cwd ? 0 : -ENOMEM;
	} else if (!ret && !r.cwd && default_cwd) {
		r.cwd = strdup(default_cwd);
		ret = r.cwd ? 0 : -ENOMEM;
	} else if (!ret && !r.cwd && r.user) {
		/* No T_CWD, no boot cwd: the user's home. */
		r.cwd = strdup(r.user_env[0] + strlen("HOME="));
		r.cwd_is_home = true;
		ret = r.cwd ? 0 : -ENOMEM;
	}
	if (ret) {
		conn__error(c, -ret, "%s", why ? why : strerror(-ret));
		goto out;
	}
	p.pty = r.pty;
	p.pend_buf = malloc(KILN_FRAME_MAX);
	if (!p.pend_buf) {
		conn__error(c, ENOMEM, NULL);
		goto out;
	}
	if (container__exec_prepare(c, &r.cx) || spawn(&p, &r))
		goto out;
	if (r.timeout_ms)
		p.deadline = now_ms() + (int64_t)(r.timeout_ms > INT32_MAX ?
							  INT32_MAX :
							  r.timeout_ms);

	if (kiln_tlv__put_u64(&b, KILN_T_PID, p.pid) ||
	    outq_frame(&p.out, KILN_MSG_PROC_STARTED, b.data, b.len)) {
		host_gone(&p);
		goto out;
	}
	if (relay(&p) == 0) {
		kiln_buf__reset(&b);
		if (!exit_payload(&p, &b))
			outq_frame(&p.out, KILN_MSG_PROC_EXIT, b.data, b.len);
	}
	flush_out(&p);
out:
	close_fd(&p.in_fd);
	close_fd(&p.out_fd);
	close_fd(&p.err_fd);
	close_fd(&p.master); /* last: the hangup waits for the exit */
	close_fd(&p.pidfd);
	free(p.pend_buf);
	free(p.out.data);
	kiln_buf__free(&b);
	req_free(&r);
}
