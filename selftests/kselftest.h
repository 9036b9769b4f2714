/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kselftest.h - a small test harness in the shape of the kernel's
 * kselftest_harness.h, written for Kiln.
 *
 *	TEST(name) { ... }
 *	TEST_TIMEOUT(name, secs) { ... }
 *
 *	FIXTURE(fx) { int fd; };
 *	FIXTURE_SETUP(fx) { self->fd = open(...); ASSERT_LE(0, self->fd); }
 *	FIXTURE_TEARDOWN(fx) { close(self->fd); }
 *	TEST_F(fx, name) { ASSERT_EQ(0, do_something(self->fd)); }
 *
 *	TEST_HARNESS_MAIN
 *
 * Every test runs in its own forked process (and process group) under a
 * timeout: 30 s by default, KILN_TEST_TIMEOUT=<secs> in the environment
 * changes the default, TEST_TIMEOUT()/TEST_F_TIMEOUT() set it per test.
 * A test that is killed by a signal, exits non-zero or times out fails.
 *
 * ASSERT_*() stops the test (a longjmp back into the test wrapper, so the
 * fixture teardown still runs once setup has completed); EXPECT_*() records
 * the failure and carries on. Both take an optional statement that runs
 * only on failure: ASSERT_EQ(0, ret) TH_LOG("errno %d", errno);
 * The comparisons work on integers and pointers, by value: a negative
 * signed value is smaller than any unsigned value, so ASSERT_NE(-1, ~0u)
 * holds. Strings have ASSERT_STREQ()/ASSERT_STRNE().
 *
 * SKIP(statement, fmt, ...) records the reason and runs the statement
 * (usually "return"). A skip in FIXTURE_SETUP skips the test body.
 *
 * Output is TAP 13 on stdout; diagnostics are "# " lines. The binary
 * exits 0 when nothing failed, 1 when something failed and 4 (KSFT_SKIP)
 * when every test skipped. Options: -t NAME runs only the named test(s)
 * (repeatable), -x NAME leaves the named test(s) out (repeatable: how
 * run_all.sh resumes a suite that a crashed harness cut off, without the
 * tests that had already ended), -l lists the tests. TEST_MANUAL()
 * declares a test that only runs when named with -t (used by the
 * harness's own selftest).
 *
 * Registration: a constructor per test inserts it into a list kept in
 * this header, ordered by the line of its declaration, so the run order
 * is the declaration order whatever order the constructors run in. One
 * test binary is one translation unit including this header.
 */
#ifndef KILN_SELFTESTS_KSELFTEST_H
#define KILN_SELFTESTS_KSELFTEST_H

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>

#define KSFT_PASS 0
#define KSFT_FAIL 1
#define KSFT_SKIP 4

#define KSFT_DEFAULT_TIMEOUT 30 /* seconds */
#define KSFT_TIMEOUT_ENV     "KILN_TEST_TIMEOUT"
#define KSFT_REASON_MAX	     256

#define __ksft_unused	    __attribute__((unused))
#define __ksft_printf(a, b) __attribute__((format(printf, a, b)))

/* Shared (MAP_SHARED) between the runner and the forked test process. */
struct __test_result {
	int failed;
	int skipped;
	int environment; /* ksft_blame_environment() was called */
	char reason[KSFT_REASON_MAX];
	char environment_why[KSFT_REASON_MAX];
};

struct __test_metadata {
	const char *name;
	void (*fn)(struct __test_metadata *);
	int line;	      /* declaration line: the run order */
	unsigned int timeout; /* seconds, 0: the default */
	bool manual;	      /* only run when selected with -t */
	/* Set in the test process only. */
	struct __test_result *result;
	jmp_buf env; /* where ASSERT_*() and SKIP helpers land */
	bool setup_done;
	bool teardown_started;
	struct __test_metadata *next;
};

static struct __test_metadata *__ksft_tests __ksft_unused;
/* The test running in this process, for helpers without _metadata. */
static struct __test_metadata *__ksft_current __ksft_unused;

/*
 * Called by a test that saw the machine under it misbehave in a way it can
 * name (selftests/kvm/vmm_util.h: a guest triple fault inside the nested
 * harness), with why. If the test then fails, it runs again from the
 * start, and only the last run counts; the output says so with a line
 * "# kiln-harness-flake: TEST: WHY; running it again (run K of at most
 * KSFT_ENVIRONMENT_RUNS)". A pass is left as it is. A test runs at most
 * KSFT_ENVIRONMENT_RUNS times in all, each rerun blamed on its own
 * evidence: a failure of a rerun without any is the test's.
 */
#define KSFT_ENVIRONMENT_RUNS 3

static inline void ksft_blame_environment(const char *why) __ksft_unused;

/*
 * A watch on the machine under the tests (selftests/kvm/harness_watch.h:
 * the nested harness's kernel log and its stuck guests). The runner calls
 * start() before each run of a test; timed_out() (if set) when a run
 * times out, before its process group @pgid is killed; and, when a run
 * failed or timed out without ksft_blame_environment(), check(). Each
 * returns true, with why, if the machine misbehaved; the test then runs
 * again, as if blamed (the last allowed run is looked at all the same,
 * for the log).
 */
struct ksft_environment_watch {
	void (*start)(void);
	bool (*timed_out)(pid_t pgid, char *why, size_t len);
	bool (*check)(char *why, size_t len);
};

static const struct ksft_environment_watch *__ksft_watch __ksft_unused;

static inline void __ksft_unused
ksft_watch_environment(const struct ksft_environment_watch *w)
{
	__ksft_watch = w;
}

static inline void __ksft_register(struct __test_metadata *t)
{
	struct __test_metadata **p = &__ksft_tests;

	while (*p && (*p)->line <= t->line)
		p = &(*p)->next;
	t->next = *p;
	*p = t;
}

/* ---- declaring tests ---------------------------------------------- */

#define __KSFT_REGISTER(id, test_name, wrapper, secs, is_manual)       \
	static struct __test_metadata __ksft_meta_##id = {             \
		.name = test_name,                                     \
		.fn = wrapper,                                         \
		.line = __LINE__,                                      \
		.timeout = (secs),                                     \
		.manual = (is_manual),                                 \
	};                                                             \
	static void __attribute__((constructor)) __ksft_reg_##id(void) \
	{                                                              \
		__ksft_register(&__ksft_meta_##id);                    \
	}

#define __TEST_IMPL(name, secs, is_manual)                              \
	static void __test_##name(struct __test_metadata *_metadata);   \
	static void __wrapper_##name(struct __test_metadata *_metadata) \
	{                                                               \
		if (setjmp(_metadata->env) == 0)                        \
			__test_##name(_metadata);                       \
	}                                                               \
	__KSFT_REGISTER(name, #name, __wrapper_##name, secs, is_manual) \
	static void __test_##name(                                      \
		struct __test_metadata __ksft_unused *_metadata)

#define TEST(name)			__TEST_IMPL(name, 0, false)
#define TEST_TIMEOUT(name, secs)	__TEST_IMPL(name, secs, false)
#define TEST_MANUAL(name)		__TEST_IMPL(name, 0, true)
#define TEST_MANUAL_TIMEOUT(name, secs) __TEST_IMPL(name, secs, true)

#define FIXTURE_DATA(fx) struct __fixture_##fx

/* FIXTURE(fx) { members }; both SETUP and TEARDOWN must then be defined. */
#define FIXTURE(fx)                                                     \
	FIXTURE_DATA(fx);                                               \
	static void __fixture_##fx##_setup(struct __test_metadata *,    \
					   FIXTURE_DATA(fx) *);         \
	static void __fixture_##fx##_teardown(struct __test_metadata *, \
					      FIXTURE_DATA(fx) *);      \
	FIXTURE_DATA(fx)

#define FIXTURE_SETUP(fx)                                        \
	static void __fixture_##fx##_setup(                      \
		struct __test_metadata __ksft_unused *_metadata, \
		FIXTURE_DATA(fx) __ksft_unused *self)

#define FIXTURE_TEARDOWN(fx)                                     \
	static void __fixture_##fx##_teardown(                   \
		struct __test_metadata __ksft_unused *_metadata, \
		FIXTURE_DATA(fx) __ksft_unused *self)

/*
 * The fixture lives in static storage: it is read again after a longjmp,
 * which automatic variables would not survive reliably. Each test runs in
 * a fresh process, so it starts zeroed every time.
 */
#define __TEST_F_IMPL(fx, name, secs, is_manual)                               \
	static void __test_##fx##_##name(struct __test_metadata *,             \
					 FIXTURE_DATA(fx) *);                  \
	static void __wrapper_##fx##_##name(struct __test_metadata *_metadata) \
	{                                                                      \
		static FIXTURE_DATA(fx) data;                                  \
                                                                               \
		if (setjmp(_metadata->env) == 0) {                             \
			__fixture_##fx##_setup(_metadata, &data);              \
			_metadata->setup_done = true;                          \
			if (!__ksft_stopped(_metadata))                        \
				__test_##fx##_##name(_metadata, &data);        \
		}                                                              \
		if (_metadata->setup_done && !_metadata->teardown_started) {   \
			_metadata->teardown_started = true;                    \
			if (setjmp(_metadata->env) == 0)                       \
				__fixture_##fx##_teardown(_metadata, &data);   \
		}                                                              \
	}                                                                      \
	__KSFT_REGISTER(fx##_##name, #fx "." #name, __wrapper_##fx##_##name,   \
			secs, is_manual)                                       \
	static void __test_##fx##_##name(                                      \
		struct __test_metadata __ksft_unused *_metadata,               \
		FIXTURE_DATA(fx) __ksft_unused *self)

#define TEST_F(fx, name)	       __TEST_F_IMPL(fx, name, 0, false)
#define TEST_F_TIMEOUT(fx, name, secs) __TEST_F_IMPL(fx, name, secs, false)
#define TEST_F_MANUAL(fx, name)	       __TEST_F_IMPL(fx, name, 0, true)

/* ---- reporting from inside a test --------------------------------- */

static inline bool __ksft_stopped(const struct __test_metadata *m)
{
	return m->result->failed || m->result->skipped;
}

/* Every line of the message becomes a "# " TAP diagnostic line. */
static inline __ksft_printf(3, 4) void __ksft_log(const char *file, int line,
						  const char *fmt, ...)
{
	char *msg = NULL, *p, *nl;
	va_list ap;
	int len;

	va_start(ap, fmt);
	len = vasprintf(&msg, fmt, ap);
	va_end(ap);
	if (len < 0) {
		printf("# %s:%d: (TH_LOG: out of memory)\n", file, line);
		return;
	}
	printf("# %s:%d: ", file, line);
	for (p = msg; (nl = strchr(p, '\n')); p = nl + 1)
		printf("%.*s\n# ", (int)(nl - p), p);
	printf("%s\n", p);
	fflush(stdout);
	free(msg);
}

#define TH_LOG(fmt, ...) __ksft_log(__FILE__, __LINE__, fmt, ##__VA_ARGS__)

static inline __attribute__((format(printf, 2, 0))) void
__ksft_vskip(struct __test_metadata *m, const char *fmt, va_list ap)
{
	char *c;

	m->result->skipped = 1;
	vsnprintf(m->result->reason, sizeof(m->result->reason), fmt, ap);
	/* The reason goes on the TAP line: keep it on one line. */
	for (c = m->result->reason; *c; c++)
		if (*c == '\n' || *c == '\r')
			*c = ' ';
}

static inline __ksft_printf(2, 3) void __ksft_skip(struct __test_metadata *m,
						   const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	__ksft_vskip(m, fmt, ap);
	va_end(ap);
}

/* SKIP(return, "no %s", "thing"): record why, then leave. */
#define SKIP(statement, fmt, ...)                           \
	do {                                                \
		__ksft_skip(_metadata, fmt, ##__VA_ARGS__); \
		statement;                                  \
	} while (0)

/*
 * For helpers called from a test that have no _metadata (the KVM
 * utilities): skip or fail the running test and leave it at once. From a
 * thread other than the test's main thread a longjmp is not possible:
 * the whole test process exits with the matching status instead.
 */
static inline __attribute__((noreturn)) void __ksft_leave(int status)
{
	fflush(stdout);
	if (__ksft_current && gettid() == getpid())
		longjmp(__ksft_current->env, 1);
	_exit(status);
}

static inline __ksft_printf(1, 2)
	__attribute__((noreturn)) void ksft_test_skip(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (__ksft_current) {
		__ksft_vskip(__ksft_current, fmt, ap);
	} else {
		printf("# SKIP ");
		vprintf(fmt, ap);
		printf("\n");
	}
	va_end(ap);
	__ksft_leave(KSFT_SKIP);
}

static inline __attribute__((noreturn)) void ksft_test_fail(void)
{
	if (__ksft_current)
		__ksft_current->result->failed = 1;
	__ksft_leave(KSFT_FAIL);
}

/* ---- assertions --------------------------------------------------- */

enum __ksft_op {
	KSFT_OP_EQ,
	KSFT_OP_NE,
	KSFT_OP_LT,
	KSFT_OP_LE,
	KSFT_OP_GT,
	KSFT_OP_GE
};

enum __ksft_kind { KSFT_UNSIGNED, KSFT_SIGNED, KSFT_POINTER };

/* 5 is GCC's pointer_type_class. */
#define __ksft_kind(x)                                           \
	(__builtin_classify_type(x) == 5	? KSFT_POINTER : \
	 ((__typeof__(x))-1 < (__typeof__(x))1) ? KSFT_SIGNED :  \
						  KSFT_UNSIGNED)

/* Compare by mathematical value: -1 < 0u, unlike the C conversion. */
static inline int __ksft_compare(enum __ksft_kind ak, uintmax_t a,
				 enum __ksft_kind bk, uintmax_t b)
{
	bool a_neg = ak == KSFT_SIGNED && (intmax_t)a < 0;
	bool b_neg = bk == KSFT_SIGNED && (intmax_t)b < 0;

	if (a_neg != b_neg)
		return a_neg ? -1 : 1;
	/* Same sign: two's complement order is the unsigned order. */
	return a < b ? -1 : a > b;
}

static inline void __ksft_print_value(enum __ksft_kind k, uintmax_t v)
{
	if (k == KSFT_SIGNED)
		printf("%jd", (intmax_t)v);
	else if (k == KSFT_POINTER)
		printf("%#jx", v);
	else
		printf("%ju", v);
}

static inline int __ksft_cmp_check(struct __test_metadata *m, const char *file,
				   int line, const char *exp_str,
				   const char *op_str, const char *seen_str,
				   enum __ksft_op op, enum __ksft_kind ek,
				   uintmax_t exp, enum __ksft_kind sk,
				   uintmax_t seen)
{
	int c = __ksft_compare(ek, exp, sk, seen);
	bool ok;

	switch (op) {
	case KSFT_OP_EQ:
		ok = c == 0;
		break;
	case KSFT_OP_NE:
		ok = c != 0;
		break;
	case KSFT_OP_LT:
		ok = c < 0;
		break;
	case KSFT_OP_LE:
		ok = c <= 0;
		break;
	case KSFT_OP_GT:
		ok = c > 0;
		break;
	default:
		ok = c >= 0;
		break;
	}
	if (ok)
		return 0;
	m->result->failed = 1;
	printf("# %s:%d: Expected %s (", file, line, exp_str);
	__ksft_print_value(ek, exp);
	printf(") %s %s (", op_str, seen_str);
	__ksft_print_value(sk, seen);
	printf(")\n");
	fflush(stdout);
	return 1;
}

static inline int __ksft_bool_check(struct __test_metadata *m, const char *file,
				    int line, const char *str, bool value,
				    bool want)
{
	if (value == want)
		return 0;
	m->result->failed = 1;
	printf("# %s:%d: Expected %s to be %s\n", file, line, str,
	       want ? "true" : "false");
	fflush(stdout);
	return 1;
}

/* A quoted string on one line: newlines would break the TAP stream. */
static inline void __ksft_print_str(const char *str)
{
	const unsigned char *c;

	if (!str) {
		printf("(null)");
		return;
	}
	putchar('"');
	for (c = (const unsigned char *)str; *c; c++) {
		if (*c == '\n')
			printf("\\n");
		else if (*c == '"' || *c == '\\')
			printf("\\%c", *c);
		else if (*c < 0x20 || *c >= 0x7f)
			printf("\\x%02x", *c);
		else
			putchar(*c);
	}
	putchar('"');
}

static inline int __ksft_str_check(struct __test_metadata *m, const char *file,
				   int line, const char *exp_str,
				   const char *seen_str, const char *exp,
				   const char *seen, bool eq)
{
	bool same = exp && seen ? !strcmp(exp, seen) : exp == seen;

	if (same == eq)
		return 0;
	m->result->failed = 1;
	printf("# %s:%d: Expected %s ", file, line, exp_str);
	__ksft_print_str(exp);
	printf(" %s %s ", eq ? "==" : "!=", seen_str);
	__ksft_print_str(seen);
	printf("\n");
	fflush(stdout);
	return 1;
}

/* Runs after the optional on-failure statement of a failed check. */
static inline int __ksft_check_end(struct __test_metadata *m, bool is_assert)
{
	fflush(stdout);
	if (is_assert)
		longjmp(m->env, 1);
	return 0;
}

/*
 * for (trigger = check(); trigger; trigger = end()) <statement>
 * The statement after the macro (often just ";") runs once, on failure
 * only; end() then longjmps out for an ASSERT.
 */
#define __KSFT_LOOP(check, is_assert)                      \
	for (int __ksft_trigger = (check); __ksft_trigger; \
	     __ksft_trigger = __ksft_check_end(_metadata, is_assert))

#define __KSFT_CMP(expected, seen, op, op_str, is_assert)                   \
	__KSFT_LOOP(({                                                      \
			    __typeof__(expected) __ksft_exp = (expected);   \
			    __typeof__(seen) __ksft_seen = (seen);          \
			    __ksft_cmp_check(_metadata, __FILE__, __LINE__, \
					     #expected, op_str, #seen, op,  \
					     __ksft_kind(__ksft_exp),       \
					     (uintmax_t)__ksft_exp,         \
					     __ksft_kind(__ksft_seen),      \
					     (uintmax_t)__ksft_seen);       \
		    }),                                                     \
		    is_assert)

#define __KSFT_BOOL(expr, want, is_assert)                                  \
	__KSFT_LOOP(__ksft_bool_check(_metadata, __FILE__, __LINE__, #expr, \
				      !!(expr), want),                      \
		    is_assert)

#define __KSFT_STR(expected, seen, eq, is_assert)                              \
	__KSFT_LOOP(__ksft_str_check(_metadata, __FILE__, __LINE__, #expected, \
				     #seen, (expected), (seen), eq),           \
		    is_assert)

#define ASSERT_EQ(expected, seen) \
	__KSFT_CMP(expected, seen, KSFT_OP_EQ, "==", true)
#define ASSERT_NE(expected, seen) \
	__KSFT_CMP(expected, seen, KSFT_OP_NE, "!=", true)
#define ASSERT_LT(expected, seen) \
	__KSFT_CMP(expected, seen, KSFT_OP_LT, "<", true)
#define ASSERT_LE(expected, seen) \
	__KSFT_CMP(expected, seen, KSFT_OP_LE, "<=", true)
#define ASSERT_GT(expected, seen) \
	__KSFT_CMP(expected, seen, KSFT_OP_GT, ">", true)
#define ASSERT_GE(expected, seen) \
	__KSFT_CMP(expected, seen, KSFT_OP_GE, ">=", true)
#define ASSERT_TRUE(expr)	     __KSFT_BOOL(expr, true, true)
#define ASSERT_FALSE(expr)	     __KSFT_BOOL(expr, false, true)
#define ASSERT_STREQ(expected, seen) __KSFT_STR(expected, seen, true, true)
#define ASSERT_STRNE(expected, seen) __KSFT_STR(expected, seen, false, true)

#define EXPECT_EQ(expected, seen) \
	__KSFT_CMP(expected, seen, KSFT_OP_EQ, "==", false)
#define EXPECT_NE(expected, seen) \
	__KSFT_CMP(expected, seen, KSFT_OP_NE, "!=", false)
#define EXPECT_LT(expected, seen) \
	__KSFT_CMP(expected, seen, KSFT_OP_LT, "<", false)
#define EXPECT_LE(expected, seen) \
	__KSFT_CMP(expected, seen, KSFT_OP_LE, "<=", false)
#define EXPECT_GT(expected, seen) \
	__KSFT_CMP(expected, seen, KSFT_OP_GT, ">", false)
#define EXPECT_GE(expected, seen) \
	__KSFT_CMP(expected, seen, KSFT_OP_GE, ">=", false)
#define EXPECT_TRUE(expr)	     __KSFT_BOOL(expr, true, false)
#define EXPECT_FALSE(expr)	     __KSFT_BOOL(expr, false, false)
#define EXPECT_STREQ(expected, seen) __KSFT_STR(expected, seen, true, false)
#define EXPECT_STRNE(expected, seen) __KSFT_STR(expected, seen, false, false)

/* ---- the runner ---------------------------------------------------- */

struct __ksft_totals {
	unsigned int pass;
	unsigned int fail;
	unsigned int skip;
};

static inline unsigned int __ksft_default_timeout(void)
{
	const char *env = getenv(KSFT_TIMEOUT_ENV);
	unsigned long secs;
	char *end;

	if (!env || !*env)
		return KSFT_DEFAULT_TIMEOUT;
	errno = 0;
	secs = strtoul(env, &end, 10);
	if (errno || *end || !secs || secs > 24 * 3600) {
		printf("# ignoring %s=%s: want seconds in 1..86400\n",
		       KSFT_TIMEOUT_ENV, env);
		return KSFT_DEFAULT_TIMEOUT;
	}
	return secs;
}

static inline __attribute__((noreturn)) void
__ksft_child(struct __test_metadata *t, struct __test_result *res,
	     const sigset_t *oldmask)
{
	sigprocmask(SIG_SETMASK, oldmask, NULL);
	/* Own process group, so a timeout kills what the test spawned. */
	setpgid(0, 0);
	t->result = res;
	__ksft_current = t;
	t->fn(t);
	fflush(stdout);
	fflush(stderr);
	_exit(res->failed ? KSFT_FAIL : res->skipped ? KSFT_SKIP : KSFT_PASS);
}

static inline void ksft_blame_environment(const char *why)
{
	struct __test_result *res =
		__ksft_current ? __ksft_current->result : NULL;

	if (!res || res->environment)
		return;
	res->environment = 1;
	snprintf(res->environment_why, sizeof(res->environment_why), "%s", why);
}

/*
 * Wait for @pid for at most @secs seconds; SIGCHLD is blocked by the
 * caller, so it stays pending for sigtimedwait(). Returns false on timeout
 * (the child is then still running).
 */
static inline bool __ksft_wait(pid_t pid, unsigned int secs, int *status)
{
	struct timespec now, deadline, left;
	sigset_t chld;

	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += secs;
	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);

		if (r == pid)
			return true;
		if (r < 0 && errno != EINTR) {
			printf("# waitpid: %s\n", strerror(errno));
			*status = KSFT_FAIL << 8;
			return true;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		left.tv_sec = deadline.tv_sec - now.tv_sec;
		left.tv_nsec = deadline.tv_nsec - now.tv_nsec;
		if (left.tv_nsec < 0) {
			left.tv_nsec += 1000000000L;
			left.tv_sec--;
		}
		if (left.tv_sec < 0)
			return false;
		sigtimedwait(&chld, NULL, &left);
	}
}

static inline void __ksft_run_one(struct __test_metadata *t, unsigned int nr,
				  unsigned int default_timeout,
				  struct __test_result *res,
				  struct __ksft_totals *totals)
{
	unsigned int secs = t->timeout ? t->timeout : default_timeout;
	unsigned int run = 1;
	bool timed_out;
	sigset_t chld, oldmask;
	int status = 0;
	struct timespec t0, t1;
	pid_t pid;

	clock_gettime(CLOCK_MONOTONIC, &t0);
rerun:
	memset(res, 0, sizeof(*res));
	timed_out = false;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &oldmask);
	printf("# RUN %s\n", t->name);
	fflush(stdout);
	fflush(stderr);
	if (__ksft_watch)
		__ksft_watch->start();
	pid = fork();
	if (pid == 0)
		__ksft_child(t, res, &oldmask);
	if (pid < 0) {
		printf("# fork: %s\n", strerror(errno));
		printf("not ok %u %s\n", nr, t->name);
		totals->fail++;
		goto out;
	}
	setpgid(pid, pid); /* also done by the child: whoever is first */
	if (!__ksft_wait(pid, secs, &status)) {
		if (__ksft_watch && __ksft_watch->timed_out &&
		    __ksft_watch->timed_out(pid, res->environment_why,
					    sizeof(res->environment_why)))
			res->environment = 1;
		kill(-pid, SIGKILL);
		waitpid(pid, &status, 0);
		timed_out = true;
		res->failed = 1;
	}
	/* Reap anything the test left behind in its process group. */
	kill(-pid, SIGKILL);

	if (timed_out) {
		printf("# %s: timed out after %u s\n", t->name, secs);
	} else if (WIFSIGNALED(status)) {
		printf("# %s: killed by signal %d (%s)\n", t->name,
		       WTERMSIG(status), strsignal(WTERMSIG(status)));
		res->failed = 1;
	} else if (WEXITSTATUS(status) == KSFT_SKIP && !res->failed) {
		res->skipped = 1;
	} else if (WEXITSTATUS(status) != KSFT_PASS) {
		if (!res->failed)
			printf("# %s: exited with status %d\n", t->name,
			       WEXITSTATUS(status));
		res->failed = 1;
	}

	if (res->failed && !res->environment && __ksft_watch &&
	    __ksft_watch->check(res->environment_why,
				sizeof(res->environment_why)))
		res->environment = 1;
	res->environment_why[sizeof(res->environment_why) - 1] = '\0';
	if (res->failed && res->environment && run < KSFT_ENVIRONMENT_RUNS) {
		run++;
		printf("# kiln-harness-flake: %s: %s; running it again (run "
		       "%u of at most %u)\n",
		       t->name, res->environment_why, run,
		       KSFT_ENVIRONMENT_RUNS);
		fflush(stdout);
		sigprocmask(SIG_SETMASK, &oldmask, NULL);
		goto rerun;
	}
	if (res->failed && res->environment)
		printf("# %s: %s, on its last run: the failure stands\n",
		       t->name, res->environment_why);
	if (timed_out) {
		printf("not ok %u %s # TIMEOUT after %u s\n", nr, t->name,
		       secs);
		totals->fail++;
	} else if (res->failed) {
		printf("not ok %u %s\n", nr, t->name);
		totals->fail++;
	} else if (res->skipped) {
		res->reason[sizeof(res->reason) - 1] = '\0';
		printf("ok %u %s # SKIP %s\n", nr, t->name,
		       res->reason[0] ? res->reason : "(no reason given)");
		totals->skip++;
	} else {
		printf("ok %u %s\n", nr, t->name);
		totals->pass++;
	}
	/* Its reruns included: for run_all.sh's list of the slowest. */
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("# kiln-test-time: %s %lld\n", t->name,
	       (long long)(t1.tv_sec - t0.tv_sec));
out:
	fflush(stdout);
	sigprocmask(SIG_SETMASK, &oldmask, NULL);
}

static inline bool __ksft_named(const struct __test_metadata *t, char **names,
				int nr_names)
{
	int i;

	for (i = 0; i < nr_names; i++)
		if (!strcmp(names[i], t->name))
			return true;
	return false;
}

static inline bool __ksft_selected(const struct __test_metadata *t,
				   char **names, int nr_names, char **out,
				   int nr_out)
{
	if (__ksft_named(t, out, nr_out))
		return false;
	if (!nr_names)
		return !t->manual;
	return __ksft_named(t, names, nr_names);
}

static inline void __ksft_usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s [-l] [-t TEST]... [-x TEST]...\n"
		"  -t TEST  run only TEST (repeatable; also runs manual "
		"tests)\n"
		"  -x TEST  leave TEST out (repeatable)\n"
		"  -l       list the tests\n"
		"  %s=SECS  default per-test timeout (%d s)\n",
		prog, KSFT_TIMEOUT_ENV, KSFT_DEFAULT_TIMEOUT);
}

static inline int __ksft_main(int argc, char **argv)
{
	struct __ksft_totals totals = { 0 };
	struct __test_metadata *t;
	struct __test_result *res;
	unsigned int secs, planned = 0, nr = 0;
	int opt, nr_names = 0, nr_out = 0, i, ret;
	char **names, **out;

	/* One array: -t names from the front, -x names from the back. */
	names = calloc(argc, sizeof(*names));
	if (!names) {
		perror("calloc");
		return KSFT_FAIL;
	}
	out = names + argc;
	while ((opt = getopt(argc, argv, "hlt:x:")) != -1) {
		switch (opt) {
		case 't':
			names[nr_names++] = optarg;
			break;
		case 'x':
			*--out = optarg;
			nr_out++;
			break;
		case 'l':
			for (t = __ksft_tests; t; t = t->next)
				printf("%s%s\n", t->name,
				       t->manual ? " (manual)" : "");
			free(names);
			return KSFT_PASS;
		case 'h':
			__ksft_usage(argv[0]);
			free(names);
			return KSFT_PASS;
		default:
			__ksft_usage(argv[0]);
			free(names);
			return KSFT_FAIL;
		}
	}
	for (i = 0; i < nr_names + nr_out; i++) {
		const char *name = i < nr_names ? names[i] : out[i - nr_names];

		for (t = __ksft_tests; t; t = t->next)
			if (!strcmp(name, t->name))
				break;
		if (!t) {
			fprintf(stderr, "%s: no test named '%s'\n", argv[0],
				name);
			free(names);
			return KSFT_FAIL;
		}
	}

	res = mmap(NULL, sizeof(*res), PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (res == MAP_FAILED) {
		perror("mmap");
		free(names);
		return KSFT_FAIL;
	}
	for (t = __ksft_tests; t; t = t->next)
		planned += __ksft_selected(t, names, nr_names, out, nr_out);
	secs = __ksft_default_timeout();

	printf("TAP version 13\n");
	printf("1..%u\n", planned);
	for (t = __ksft_tests; t; t = t->next)
		if (__ksft_selected(t, names, nr_names, out, nr_out))
			__ksft_run_one(t, ++nr, secs, res, &totals);
	printf("# Totals: pass:%u fail:%u skip:%u\n", totals.pass, totals.fail,
	       totals.skip);
	fflush(stdout);

	munmap(res, sizeof(*res));
	free(names);
	if (totals.fail)
		ret = KSFT_FAIL;
	else if (!totals.pass)
		ret = KSFT_SKIP;
	else
		ret = KSFT_PASS;
	return ret;
}

#define TEST_HARNESS_MAIN                       \
	int main(int argc, char **argv)         \
	{                                       \
		return __ksft_main(argc, argv); \
	}

#endif /* KILN_SELFTESTS_KSELFTEST_H */
