// SPDX-License-Identifier: GPL-2.0
/*
 * The option table's values (options-internal.h): text from the command
 * line and values from a JSON document converted by their option's kind,
 * each with the kind's error message, then stored; the command line read
 * with exact names only, --help printed from the table, and a JSON
 * document applied key by key. The table itself is options.c.
 */
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/compiler.h"
#include "lib/errf.h"
#include "lib/getopt-exact.h"
#include "lib/log.h"
#include "lib/parse.h"
#include "net/netcfg.h"
#include "vmm/config.h"
#include "vmm/options-internal.h"
#include "vmm/options.h"

/* ---- values: from text or JSON, by kind, then stored ------------------ */

/*
 * "a or b", "a, b or c", each word in quote marks: the words of the
 * '|'-separated text alt (--help's "full|cached"), or with alt NULL those
 * of the NULL-terminated list.
 */
static void or_list(char *buf, size_t len, const char *const *list,
		    const char *alt, const char *quote)
{
	const char *words[16];
	size_t n = 0, i, at = 0;
	char copy[128];
	char *p, *save;

	if (alt) {
		snprintf(copy, sizeof(copy), "%s", alt);
		for (p = strtok_r(copy, "|", &save); p && n < ARRAY_SIZE(words);
		     p = strtok_r(NULL, "|", &save))
			words[n++] = p;
	} else {
		for (; list[n] && n < ARRAY_SIZE(words); n++)
			words[n] = list[n];
	}
	buf[0] = 0;
	for (i = 0; i < n && at < len; i++) {
		const char *sep = i == 0 ? "" : i + 1 < n ? ", " : " or ";

		at += snprintf(buf + at, len - at, "%s%s%s%s", sep, quote,
			       words[i], quote);
	}
}

/* What a text kind's value looks like, for its error message. */
static const char *kind_form(enum option_kind kind)
{
	switch (kind) {
	case OPTION_IPV4:
		return "an IPv4 address (A.B.C.D)";
	case OPTION_CIDR:
		return "an IPv4 address with a prefix length (A.B.C.D/N)";
	case OPTION_MAC:
		return "a MAC address (xx:xx:xx:xx:xx:xx)";
	default:
		return "valid";
	}
}

/* The text kinds, the same from the command line and from JSON. */
static int from_string(const struct option_desc *o, const char *s,
		       union option_value *v)
{
	switch (o->kind) {
	case OPTION_IPV4:
		v->ip.prefix = 0;
		return net_addr__parse_ipv4(s, &v->ip.addr);
	case OPTION_CIDR:
		return net_addr__parse_cidr(s, &v->ip.addr, &v->ip.prefix);
	case OPTION_MAC:
		return net_addr__parse_mac(s, v->mac);
	default:
		return -EINVAL;
	}
}

/*
 * OPTION_MIB: "256" is 256 MiB, as --memory always read it; "512M",
 * "2G", "1048576K" are bytes (parse__size) in whole MiB. -EDOM: not
 * whole MiB.
 */
static int parse_mib(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t bytes;
	int ret;

	ret = parse__uint(s, max, out);
	if (ret != -EINVAL)
		return ret;
	ret = parse__size(s, max << 20, &bytes);
	if (ret)
		return ret;
	if (bytes & ((1ULL << 20) - 1))
		return -EDOM;
	*out = bytes >> 20;
	return 0;
}

/* OPTION_MIB's message for parse_mib's ret; what is "--flag" or "\"key\"". */
static int mib_error(const char *what, const char *s, int ret, char *err,
		     size_t len)
{
	if (ret == -EDOM)
		return errf(err, len, -EINVAL,
			    "%s %s: not a whole number of MiB", what, s);
	if (ret == -ERANGE)
		return errf(err, len, ret, "%s %s: out of range", what, s);
	return errf(err, len, -EINVAL,
		    "%s %s: not a size (MiB, or bytes with a K, M, G or T "
		    "suffix: 256, 512M, 2G)",
		    what, s);
}

/* --flag TEXT (TEXT NULL for a flag that takes none). */
static int from_text(const struct option_desc *o, const char *arg,
		     union option_value *v, char *err, size_t len)
{
	char choices[256];
	int ret, i;

	switch (o->kind) {
	case OPTION_STRING:
		v->s = arg;
		return 0;
	case OPTION_FLAG:
		v->b = true;
		return 0;
	case OPTION_UINT:
		ret = parse__uint(arg, o->max, &v->u);
		if (ret == -EINVAL)
			return errf(err, len, ret,
				    "--%s %s: not a decimal number", o->flag,
				    arg);
		if (ret)
			return errf(err, len, ret, "--%s %s: out of range",
				    o->flag, arg);
		return 0;
	case OPTION_SIZE:
		ret = parse__size(arg, o->max, &v->u);
		if (ret == -EINVAL)
			return errf(err, len, ret,
				    "--%s %s: not a byte count (digits, "
				    "optionally K, M, G, KiB, MiB or GiB)",
				    o->flag, arg);
		if (ret)
			return errf(err, len, ret, "--%s %s: out of range",
				    o->flag, arg);
		return 0;
	case OPTION_MIB:
		ret = parse_mib(arg, o->max, &v->u);
		if (ret) {
			snprintf(choices, sizeof(choices), "--%s", o->flag);
			return mib_error(choices, arg, ret, err, len);
		}
		return 0;
	case OPTION_CHOICE:
		i = options__choice_index(o->choices, arg);
		if (i >= 0) {
			v->choice = i;
			return 0;
		}
		or_list(choices, sizeof(choices), o->choices, o->arg, "");
		return errf(err, len, -EINVAL, "--%s %s: must be %s", o->flag,
			    arg, choices);
	case OPTION_IPV4:
	case OPTION_CIDR:
	case OPTION_MAC:
		if (!from_string(o, arg, v))
			return 0;
		return errf(err, len, -EINVAL, "--%s %s: not %s", o->flag, arg,
			    kind_form(o->kind));
	case OPTION_JSON:
		break;
	}
	return errf(err, len, -EINVAL, "--%s: not a command-line option",
		    o->flag);
}

/* "key": JSON. */
static int from_json(const struct option_desc *o, json_t *j,
		     union option_value *v, char *err, size_t len)
{
	char choices[256];
	json_int_t n = json_is_integer(j) ? json_integer_value(j) : -1;
	int i;

	switch (o->kind) {
	case OPTION_STRING:
		if (!json_is_string(j))
			return errf(err, len, -EINVAL,
				    "\"%s\" must be a string", o->key);
		v->s = json_string_value(j);
		return 0;
	case OPTION_FLAG:
		if (!json_is_boolean(j))
			return errf(err, len, -EINVAL,
				    "\"%s\" must be true or false", o->key);
		v->b = json_is_true(j);
		return 0;
	case OPTION_UINT:
		if (n < 0 || (uint64_t)n > o->max)
			return errf(err, len, -EINVAL,
				    "\"%s\" must be an integer from 0 to %llu",
				    o->key, (unsigned long long)o->max);
		v->u = n;
		return 0;
	case OPTION_SIZE:
		if (n >= 0 && (uint64_t)n <= o->max) {
			v->u = n;
			return 0;
		}
		if (json_is_string(j) &&
		    !parse__size(json_string_value(j), o->max, &v->u))
			return 0;
		return errf(err, len, -EINVAL,
			    "\"%s\" must be a byte count (an integer, or a "
			    "string such as \"64MiB\")",
			    o->key);
	case OPTION_MIB:
		if (n >= 0 && (uint64_t)n <= o->max) {
			v->u = n;
			return 0;
		}
		if (!json_is_string(j))
			return errf(err, len, -EINVAL,
				    "\"%s\" must be an integer from 0 to %llu, "
				    "or a string such as \"2G\"",
				    o->key, (unsigned long long)o->max);
		i = parse_mib(json_string_value(j), o->max, &v->u);
		if (!i)
			return 0;
		snprintf(choices, sizeof(choices), "\"%s\"", o->key);
		return mib_error(choices, json_string_value(j), i, err, len);
	case OPTION_CHOICE:
		i = json_is_string(j) ?
			    options__choice_index(o->choices,
						  json_string_value(j)) :
			    -1;
		if (i >= 0) {
			v->choice = i;
			return 0;
		}
		or_list(choices, sizeof(choices), o->choices, NULL, "\"");
		return errf(err, len, -EINVAL, "\"%s\" must be %s", o->key,
			    choices);
	case OPTION_JSON:
		v->json = j;
		return 0;
	case OPTION_IPV4:
	case OPTION_CIDR:
	case OPTION_MAC:
		if (json_is_string(j) &&
		    !from_string(o, json_string_value(j), v))
			return 0;
		return errf(err, len, -EINVAL, "\"%s\" must be %s as a string",
			    o->key, kind_form(o->kind));
	}
	return -EINVAL;
}

static int store(struct vm_config *c, const struct option_desc *o,
		 const union option_value *v, char *err, size_t len)
{
	void *field = (char *)c + o->offset;

	if (o->apply)
		return o->apply(c, v, err, len);
	switch (o->kind) {
	case OPTION_STRING:
		return options__replace_string(field, v->s);
	case OPTION_UINT:
	case OPTION_SIZE:
	case OPTION_MIB:
		*(uint64_t *)field = v->u;
		return 0;
	case OPTION_FLAG:
		*(bool *)field = v->b;
		return 0;
	case OPTION_CHOICE:
	case OPTION_JSON:
	case OPTION_IPV4:
	case OPTION_CIDR:
	case OPTION_MAC:
		break;
	}
	return -EINVAL; /* a table entry without its apply function */
}

/* ---- the command line ------------------------------------------------ */

static const char usage_head[] =
	"usage: vmm run [--kernel PATH] [--initrd PATH] [--cmdline STR] [--cpus N]\n"
	"               [--memory SIZE] [--rootfs DESC [--rootfs-mode M] ...]\n"
	"               [--vsock-socket PATH [--vsock-cid N]] [--mount SPEC]...\n"
	"               [--net auto|netns:PATH|tap-fd:N [--net-address A.B.C.D/N] ...]\n"
	"               [--no-seccomp] [--verbose] [-- COMMAND ARGS...]\n"
	"       vmm run --config FILE.json [options] [-- COMMAND ARGS...]\n"
	"       vmm start --control-socket PATH [--detach [--pid-file PATH]]\n"
	"                 [--restore DIR | --baseline-cache DIR] [options]\n"
	"       vmm start --jail DIR --uid U --gid G [--cgroup PATH ...] [options]\n"
	"       vmm facts [--config FILE.json] [options]\n"
	"       vmm snapshot pack [--level N] DIR FILE | unpack FILE DIR\n"
	"       vmm rootfs describe FILE [--format raw|qcow2] [--name NAME]\n"
	"       vmm rootfs bytes DESC [--chunk-size N]\n"
	"       vmm rootfs flatten --base DESC [--overlay persistent:STATEFILE |\n"
	"                  --overlay store:SOCKET] [--format qcow2|raw]\n"
	"                  [--cluster-size N] --out FILE|store:SOCKET\n"
	"       vmm probe-kvm\n"
	"       vmm --help | --version\n"
	"\n"
	"Boots a Linux microVM on KVM, runs COMMAND in it and exits with its status.\n"
	"vmm facts prints the configuration facts vm.facts would give for the\n"
	"same options, without booting (Documentation/api.md, \"Facts\").\n"
	"vmm snapshot pack verifies the snapshot DIR and writes it as one zstd\n"
	"archive FILE; unpack makes the directory DIR from one, verified, for\n"
	"--restore (Documentation/snapshots.md, \"Archives\").\n"
	"vmm rootfs describe prints a descriptor for an image file; bytes streams\n"
	"an image to stdout, checked against its digest; flatten writes base +\n"
	"state file or block store as one standalone image\n"
	"(Documentation/rootfs.md).\n"
	"vmm probe-kvm says whether this host's KVM can run a guest (exit 0) or\n"
	"not (exit 1), as one JSON line.\n"
	"\n";

static const char usage_tail[] =
	"\n"
	"Exit status: COMMAND's status (128+N if signal N killed it); 123 if the\n"
	"guest crashed or reset before reporting one; 125 if the vmm failed or its\n"
	"input was bad.\n";

/* The line *s starts with (length in *n); *s moves past it. NULL: no more. */
static const char *next_line(const char **s, int *n)
{
	const char *line = *s, *nl;

	if (!line)
		return NULL;
	nl = strchrnul(line, '\n');
	*n = nl - line;
	*s = *nl ? nl + 1 : NULL;
	return line;
}

/*
 * "  --flag ARG" (one line per form of the argument), then the help from
 * HELP_COLUMN: on the same line when the flag leaves room, else below.
 */
static void print_option(FILE *f, const struct option_desc *o)
{
	const char *arg = o->arg, *help = o->help, *line;
	int col = 0, n;

	do {
		if (col)
			fputc('\n', f);
		col = o->short_flag ? fprintf(f, "  -%c, --%s", o->short_flag,
					      o->flag) :
				      fprintf(f, "  --%s", o->flag);
		line = next_line(&arg, &n);
		if (line)
			col += fprintf(f, " %.*s", n, line);
	} while (arg);
	if (col + 2 <= HELP_COLUMN)
		fprintf(f, "%*s", HELP_COLUMN - col, "");
	else
		fprintf(f, "\n%*s", HELP_COLUMN, "");
	while ((line = next_line(&help, &n))) {
		fprintf(f, "%.*s\n", n, line);
		if (help)
			fprintf(f, "%*s", HELP_COLUMN, "");
	}
}

void options__usage(FILE *f)
{
	size_t i;

	fputs(usage_head, f);
	for (i = 0; i < options__nr; i++)
		if (options__table[i].flag && options__table[i].help)
			print_option(f, &options__table[i]);
	fputs(usage_tail, f);
}

/* getopt_long's table, from ours: val is OPTION_VAL_BASE + the index. */
static void long_options(struct option *lo)
{
	size_t i, n = 0;

	for (i = 0; i < options__nr; i++) {
		if (!options__table[i].flag)
			continue;
		lo[n++] = (struct option){
			.name = options__table[i].flag,
			.has_arg = options__table[i].kind == OPTION_FLAG ?
					   no_argument :
					   required_argument,
			.val = OPTION_VAL_BASE + i,
		};
	}
	lo[n++] = (struct option){ .name = "help", .val = 'h' };
	lo[n] = (struct option){ 0 };
}

/*
 * "+:h" and each short flag: stop at the first non-option (the command);
 * ':' for a missing value (lib/getopt-exact.h).
 */
static void short_options(char *s, size_t len)
{
	size_t i, n = 0;

	s[n++] = '+';
	s[n++] = ':';
	s[n++] = 'h';
	for (i = 0; i < options__nr && n + 1 < len; i++)
		if (options__table[i].short_flag)
			s[n++] = options__table[i].short_flag;
	s[n] = 0;
}

static const struct option_desc *option_for_val(int val)
{
	size_t i;

	if (val >= OPTION_VAL_BASE &&
	    (size_t)(val - OPTION_VAL_BASE) < options__nr)
		return &options__table[val - OPTION_VAL_BASE];
	for (i = 0; i < options__nr; i++)
		if (options__table[i].short_flag &&
		    options__table[i].short_flag == val)
			return &options__table[i];
	return NULL;
}

static int apply_arg(struct vm_config *c, const struct option_desc *o,
		     const char *arg)
{
	char err[OPTIONS_ERR_LEN] = "";
	union option_value v;
	int ret;

	ret = from_text(o, arg, &v, err, sizeof(err));
	if (!ret)
		ret = store(c, o, &v, err, sizeof(err));
	if (ret && !err[0])
		errf(err, sizeof(err), ret, "--%s: %s", o->flag,
		     strerror(-ret));
	if (ret)
		pr_err("%s", err);
	return ret;
}

/*
 * What the top-level Makefile builds where (O=DIR, default build): the
 * guest in DIR/guest/, its test image's descriptor and the root images'
 * in DIR/images/; and the make target that builds each.
 */
static const struct {
	const char *path; /* under DIR */
	const char *target;
} built_files[] = {
	{ "guest/vmlinux", "guest" },
	{ "guest/bzImage", "guest" },
	{ "guest/initramfs.cpio", "guest" },
	{ "guest/e2fsck.cpio", "guest" },
	{ "images/kiln-test.json", "guest" },
	{ "images/debian-12-agent.json", "image" },
};

/*
 * A kernel, initrd or image descriptor that does not exist, at a path
 * ending in one of built_files[]: one line that says which make target
 * builds it, as the options are read: "build/guest/vmlinux: No such file
 * or directory (make guest builds it)"; when DIR is not named build,
 * "(make O=DIR guest builds it)". Any other path (guest/vmlinux with no
 * DIR before it too), and any other failure, is for the file's reader to
 * report (vm.c, rootfs.c), as it was.
 */
static int check_built_file(const char *path)
{
	size_t n, fn, dn, i;
	const char *base;

	if (!path || !access(path, F_OK) || errno != ENOENT)
		return 0;
	n = strlen(path);
	for (i = 0; i < ARRAY_SIZE(built_files); i++) {
		fn = strlen(built_files[i].path);
		if (n <= fn + 1 || path[n - fn - 1] != '/' ||
		    strcmp(path + n - fn, built_files[i].path))
			continue;
		/* DIR is path[0..dn), its last component at base. */
		dn = n - fn - 1;
		base = memrchr(path, '/', dn);
		base = base ? base + 1 : path;
		if (path + dn - base == 5 && !strncmp(base, "build", 5))
			pr_err("%s: %s (make %s builds it)", path,
			       strerror(ENOENT), built_files[i].target);
		else
			pr_err("%s: %s (make O=%.*s %s builds it)", path,
			       strerror(ENOENT), (int)dn, path,
			       built_files[i].target);
		return -ENOENT;
	}
	return 0;
}

static int check_built(const struct vm_config *c)
{
	int ret;

	ret = check_built_file(c->kernel_path);
	if (!ret)
		ret = check_built_file(c->initrd_path);
	if (!ret)
		ret = check_built_file(c->rootfs.descriptor);
	return ret;
}

int options__parse_argv(struct vm_config *c, int argc, char **argv)
{
	struct option lo[OPTIONS_MAX + 2];
	char so[16], err[OPTIONS_ERR_LEN] = "";
	const struct option_desc *o;
	int opt, ret;

	long_options(lo);
	short_options(so, sizeof(so));
	optind = 1;
	while ((opt = getopt_exact__next(argc, argv, so, lo, err,
					 sizeof(err))) != -1) {
		if (opt == 'h') {
			options__usage(stdout);
			return OPTIONS_HELP;
		}
		o = option_for_val(opt);
		if (!o) {
			/* One line, not the usage: the contract for bad input. */
			pr_err("%s: %s", argv[0], err);
			return -EINVAL;
		}
		ret = apply_arg(c, o, optarg);
		if (ret)
			return ret;
	}
	if (optind < argc && strcmp(argv[optind - 1], "--")) {
		pr_err("unexpected argument '%s' (put the guest command after "
		       "--)",
		       argv[optind]);
		return -EINVAL;
	}
	if (optind < argc) {
		ret = config__set_argv(c, argv + optind, argc - optind);
		if (ret)
			return ret;
	}
	return c->facts ? 0 : check_built(c);
}

/* ---- JSON ------------------------------------------------------------ */

/* The entry for key, top level (section NULL) or inside section. */
static const struct option_desc *option_for_key(const char *section,
						const char *key)
{
	size_t i, n = section ? strlen(section) : 0;
	const char *k;

	for (i = 0; i < options__nr; i++) {
		k = options__table[i].key;
		if (!k)
			continue;
		if (section && (strncmp(k, section, n) || k[n] != '.'))
			continue;
		if (section)
			k += n + 1;
		else if (strchr(k, '.'))
			continue;
		if (!strcmp(k, key))
			return &options__table[i];
	}
	return NULL;
}

/*
 * Whether key is a section (the table has "key.x" entries); hint gets its
 * first two keys, "..." when there are more: ("image", "mode", ...).
 */
static bool is_section(const char *key, char *hint, size_t len)
{
	size_t i, n = strlen(key), at = 0;
	unsigned int found = 0;

	hint[0] = 0;
	for (i = 0; i < options__nr; i++) {
		const char *k = options__table[i].key;

		if (!k || strncmp(k, key, n) || k[n] != '.')
			continue;
		if (found < 2 && at < len)
			at += snprintf(hint + at, len - at, "%s\"%s\"",
				       found ? ", " : "", k + n + 1);
		else if (found == 2 && at < len)
			at += snprintf(hint + at, len - at, ", ...");
		found++;
	}
	return found;
}

static int apply_value(struct vm_config *c, const struct option_desc *o,
		       json_t *j, char *err, size_t len)
{
	union option_value v;
	int ret;

	ret = from_json(o, j, &v, err, len);
	if (!ret)
		ret = store(c, o, &v, err, len);
	return ret;
}

static int apply_section(struct vm_config *c, const char *section, json_t *obj,
			 const char *hint, char *err, size_t len)
{
	const struct option_desc *o;
	const char *key;
	json_t *v;
	int ret;

	if (!json_is_object(obj))
		return errf(err, len, -EINVAL, "\"%s\" must be an object (%s)",
			    section, hint);
	json_object_foreach(obj, key, v)
	{
		o = option_for_key(section, key);
		if (!o)
			return errf(err, len, -EINVAL, "unknown key \"%s.%s\"",
				    section, key);
		ret = apply_value(c, o, v, err, len);
		if (ret)
			return ret;
	}
	return 0;
}

int options__apply_json(struct vm_config *c, void *json_obj, char *err,
			size_t len)
{
	const struct option_desc *o;
	const char *key;
	char hint[128];
	json_t *v;
	int ret;

	json_object_foreach((json_t *)json_obj, key, v)
	{
		o = option_for_key(NULL, key);
		if (o)
			ret = apply_value(c, o, v, err, len);
		else if (is_section(key, hint, sizeof(hint)))
			ret = apply_section(c, key, v, hint, err, len);
		else
			ret = errf(err, len, -EINVAL, "unknown key \"%s\"",
				   key);
		if (ret)
			return ret;
	}
	return 0;
}
