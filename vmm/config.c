// SPDX-License-Identifier: GPL-2.0
/*
 * The VM's configuration: one plain struct, filled from the command line or a
 * JSON document (parsed by jansson), validated completely before use.
 */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

#include "bootloader/boot.h"
#include "vmm/config.h"

void config__init(struct vm_config *c)
{
	memset(c, 0, sizeof(*c));
	c->nr_cpus = CONFIG_DEFAULT_CPUS;
	c->mem_mib = CONFIG_DEFAULT_MEM_MIB;
	c->seccomp = true;
}

static void free_argv(char **argv)
{
	char **a;

	for (a = argv; a && *a; a++)
		free(*a);
	free(argv);
}

void config__free(struct vm_config *c)
{
	free(c->kernel_path);
	free(c->initrd_path);
	free(c->cmdline);
	free_argv(c->argv);
	memset(c, 0, sizeof(*c));
}

int config__parse_uint(const char *s, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end)
		return -EINVAL;
	if (errno)
		return -ERANGE;
	if (v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int config__set_argv(struct vm_config *c, char *const argv[], int argc)
{
	char **v;
	int i;

	v = calloc(argc + 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (i = 0; i < argc; i++) {
		v[i] = strdup(argv[i]);
		if (!v[i]) {
			free_argv(v);
			return -ENOMEM;
		}
	}
	free_argv(c->argv);
	c->argv = v;
	return 0;
}

static int errf(char *err, size_t len, int ret, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return ret;
}

static int get_string(json_t *v, const char *key, char **out, char *err,
		      size_t len)
{
	if (!json_is_string(v))
		return errf(err, len, -EINVAL, "\"%s\" must be a string", key);
	free(*out);
	*out = strdup(json_string_value(v));
	return *out ? 0 : -ENOMEM;
}

static int get_uint(json_t *v, const char *key, uint64_t max, uint64_t *out,
		    char *err, size_t len)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    (uint64_t)json_integer_value(v) > max)
		return errf(err, len, -EINVAL,
			    "\"%s\" must be an integer from 0 to %llu", key,
			    (unsigned long long)max);
	*out = json_integer_value(v);
	return 0;
}

static int get_command(struct vm_config *c, json_t *v, char *err, size_t len)
{
	size_t i, n;
	char **argv;
	int ret;

	if (!json_is_array(v) || !json_array_size(v))
		return errf(err, len, -EINVAL,
			    "\"command\" must be a non-empty array of strings");
	n = json_array_size(v);
	argv = calloc(n + 1, sizeof(*argv));
	if (!argv)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		json_t *a = json_array_get(v, i);

		if (!json_is_string(a)) {
			free(argv);
			return errf(err, len, -EINVAL,
				    "\"command\"[%zu] must be a string", i);
		}
		argv[i] = (char *)json_string_value(a);
	}
	ret = config__set_argv(c, argv, n);
	free(argv);
	return ret;
}

static int get_key(struct vm_config *c, const char *key, json_t *v, char *err,
		   size_t len)
{
	uint64_t n;
	int ret;

	if (!strcmp(key, "kernel"))
		return get_string(v, key, &c->kernel_path, err, len);
	if (!strcmp(key, "initrd"))
		return get_string(v, key, &c->initrd_path, err, len);
	if (!strcmp(key, "cmdline"))
		return get_string(v, key, &c->cmdline, err, len);
	if (!strcmp(key, "command"))
		return get_command(c, v, err, len);
	if (!strcmp(key, "cpus")) {
		ret = get_uint(v, key, UINT32_MAX, &n, err, len);
		if (!ret)
			c->nr_cpus = n;
		return ret;
	}
	if (!strcmp(key, "memoryMiB"))
		return get_uint(v, key, UINT32_MAX, &c->mem_mib, err, len);
	return errf(err, len, -EINVAL, "unknown key \"%s\"", key);
}

int config__load_json(struct vm_config *c, const char *path, char *err,
		      size_t len)
{
	json_error_t jerr;
	const char *key;
	json_t *root, *v;
	int ret = 0;

	root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		if (jerr.line < 0)
			return errf(err, len, -ENOENT, "%s", jerr.text);
		return errf(err, len, -EINVAL, "line %d column %d: %s",
			    jerr.line, jerr.column, jerr.text);
	}
	if (!json_is_object(root)) {
		json_decref(root);
		return errf(err, len, -EINVAL, "top level must be an object");
	}
	json_object_foreach(root, key, v)
	{
		ret = get_key(c, key, v, err, len);
		if (ret)
			break;
	}
	json_decref(root);
	return ret;
}

static uint64_t host_mem_mib(void)
{
	struct sysinfo si;

	if (sysinfo(&si))
		return CONFIG_MAX_MEM_MIB;
	return (uint64_t)si.totalram * si.mem_unit >> 20;
}

int config__validate(const struct vm_config *c, char *err, size_t len)
{
	uint64_t max_mib = host_mem_mib();

	if (max_mib > CONFIG_MAX_MEM_MIB)
		max_mib = CONFIG_MAX_MEM_MIB;
	if (!c->kernel_path)
		return errf(err, len, -EINVAL,
			    "no kernel given (--kernel PATH or \"kernel\")");
	if (c->nr_cpus < 1 || c->nr_cpus > KILN_MAX_CPUS)
		return errf(err, len, -EINVAL,
			    "cpus %u: must be between 1 and %u", c->nr_cpus,
			    KILN_MAX_CPUS);
	if (c->mem_mib < CONFIG_MIN_MEM_MIB || c->mem_mib > max_mib)
		return errf(err, len, -EINVAL,
			    "memory %llu MiB: must be between %u and %llu MiB "
			    "(the host's RAM)",
			    (unsigned long long)c->mem_mib, CONFIG_MIN_MEM_MIB,
			    (unsigned long long)max_mib);
	return 0;
}
