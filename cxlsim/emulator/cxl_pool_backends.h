/* cxl_pool_backends.h: the backends an emulated CXL pool segment can live on, parsed and checked.
 *
 * A backend is written "shm", "file:PATH", "dax:PATH" or "numa:N" (cxl_pool_spec_parse):
 *   shm    - a file /dev/shm/cxlsim-<owner pid>-<12 hex digits>, mode 0600, every byte
 *            reserved with posix_fallocate (a full /dev/shm is an error, not a SIGBUS);
 *   file   - a regular file, created (and removed again) if missing, grown if too short;
 *   dax    - a devdax character device or a file on a filesystem mounted with "dax"
 *            (cxl_pool_check_dax); the mapping is a multiple of 2 MiB; never created nor removed;
 *   numa   - an shm segment whose pages are bound to NUMA node N (cxl_pool_mbind, before the
 *            pages are reserved, so they land on that node).
 * cxl_pool.h creates, maps and removes segments on them. Header-only (static functions), libc
 * and Linux system calls only.
 *
 * Functions return CXL_POOL_OK, or CXL_POOL_EINPUT (the spec or the sizes are bad: the
 * user's input) or CXL_POOL_ERUN (the system refused), with a message in err naming
 * the pool and what was expected.
 */
#ifndef CXLSIM_CXL_POOL_BACKENDS_H
#define CXLSIM_CXL_POOL_BACKENDS_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define CXL_POOL_PATH_MAX 4096

enum { CXL_POOL_OK = 0, CXL_POOL_EINPUT = 1, CXL_POOL_ERUN = 2 };
enum { CXL_POOL_SHM = 0, CXL_POOL_FILE = 1, CXL_POOL_DAX = 2, CXL_POOL_NUMA = 3 };

/* A parsed pool backend ("shm", "file:PATH", "dax:PATH", "numa:N"). */
typedef struct {
    int kind;                      /* CXL_POOL_SHM, _FILE, _DAX or _NUMA */
    char path[CXL_POOL_PATH_MAX];  /* file and dax: the path as given */
    int numa_node;                 /* numa: the node */
    char text[CXL_POOL_PATH_MAX + 8]; /* the spec as written, for messages */
} cxl_pool_spec_t;

static int cxl_pool_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

static int cxl_pool_spec_parse(const char *text, cxl_pool_spec_t *out, char *err, size_t errlen)
{
    const char *expected = "expected 'shm', 'file:PATH', 'dax:PATH' or 'numa:N'";
    memset(out, 0, sizeof *out);
    if (!text || !*text) return cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool: %s, got ''", expected);
    if (strlen(text) >= CXL_POOL_PATH_MAX)
        return cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool: the path is longer than %d bytes", CXL_POOL_PATH_MAX);
    snprintf(out->text, sizeof out->text, "%s", text);
    if (strcmp(text, "shm") == 0) {
        out->kind = CXL_POOL_SHM;
        return CXL_POOL_OK;
    }
    if ((strncmp(text, "file:", 5) == 0 || strncmp(text, "dax:", 4) == 0) && strchr(text, ':')[1]) {
        out->kind = text[0] == 'f' ? CXL_POOL_FILE : CXL_POOL_DAX;
        snprintf(out->path, sizeof out->path, "%s", strchr(text, ':') + 1);
        return CXL_POOL_OK;
    }
    if (strncmp(text, "numa:", 5) == 0 && text[5]) {
        const char *d = text + 5;
        for (const char *c = d; *c; c++)
            if (*c < '0' || *c > '9' || c - d > 6) return cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool: %s, got '%s'", expected, text);
        out->kind = CXL_POOL_NUMA;
        out->numa_node = atoi(d);
        return CXL_POOL_OK;
    }
    return cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool: %s, got '%s'", expected, text);
}

/* 1 if the backend's default coherence is flush (dax: CXL 2.0 memory is not coherent across hosts). */
static int cxl_pool_default_flush(const cxl_pool_spec_t *spec)
{
    return spec->kind == CXL_POOL_DAX;
}

/* Size in bytes of a devdax character device (from sysfs), or -1 if it is none. */
static long long cxl_pool_dax_device_size(const struct stat *st)
{
    if (!S_ISCHR(st->st_mode)) return -1;
    char path[128];
    snprintf(path, sizeof path, "/sys/dev/char/%u:%u/size", major(st->st_rdev), minor(st->st_rdev));
    FILE *f = fopen(path, "r");
    long long size = -1;
    if (f) {
        if (fscanf(f, "%lld", &size) != 1) size = -1;
        fclose(f);
    }
    return size;
}

/* Accept a devdax device or a file on a filesystem mounted with the dax option. */
static int cxl_pool_check_dax(const cxl_pool_spec_t *spec, char *err, size_t errlen)
{
    struct stat st;
    if (stat(spec->path, &st) != 0)
        return cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool %s: %s", spec->text, strerror(errno));
    if (S_ISCHR(st.st_mode)) {
        char link[128], target[CXL_POOL_PATH_MAX];
        snprintf(link, sizeof link, "/sys/dev/char/%u:%u/subsystem", major(st.st_rdev), minor(st.st_rdev));
        ssize_t n = readlink(link, target, sizeof target - 1);
        target[n > 0 ? n : 0] = 0;
        const char *base = strrchr(target, '/') ? strrchr(target, '/') + 1 : target;
        if (strcmp(base, "dax") != 0)
            return cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool %s: a character device, but not a devdax "
                                 "device (its sysfs subsystem is %s)", spec->text, *base ? base : "unknown");
        return CXL_POOL_OK;
    }
    if (!S_ISREG(st.st_mode))
        return cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool %s: expected a devdax device (/dev/daxX.Y) or "
                             "a file on a DAX filesystem", spec->text);
    char real[CXL_POOL_PATH_MAX], line[2 * CXL_POOL_PATH_MAX], best_opts[1024] = "?";
    size_t best_len = 0;
    if (!realpath(spec->path, real)) snprintf(real, sizeof real, "%s", spec->path);
    FILE *f = fopen("/proc/mounts", "r");
    while (f && fgets(line, sizeof line, f)) {
        char dev[1024], mnt[CXL_POOL_PATH_MAX], fs[256], opts[1024];
        if (sscanf(line, "%1023s %4095s %255s %1023s", dev, mnt, fs, opts) != 4) continue;
        size_t len = strlen(mnt);
        int inside = strncmp(real, mnt, len) == 0 && (real[len] == '/' || real[len] == 0 || strcmp(mnt, "/") == 0);
        if (inside && len >= best_len) {
            best_len = len;
            snprintf(best_opts, sizeof best_opts, "%s", opts);
        }
    }
    if (f) fclose(f);
    if (!strstr(best_opts, "dax"))
        return cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool %s: the file is not on a filesystem mounted with "
                             "'dax' (its mount has options %s); use file:%s to map it as an ordinary file",
                             spec->text, best_opts, spec->path);
    return CXL_POOL_OK;
}

static int cxl_pool_check_numa_node(const cxl_pool_spec_t *spec, char *err, size_t errlen)
{
    char path[128];
    struct stat st;
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d", spec->numa_node);
    if (stat(path, &st) != 0)
        return cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool %s: no NUMA node %d on this machine",
                             spec->text, spec->numa_node);
    return CXL_POOL_OK;
}

/* Bind [addr, addr + length) to NUMA node `node` (MPOL_BIND, MPOL_MF_STRICT | MPOL_MF_MOVE). */
static int cxl_pool_mbind(void *addr, uint64_t length, int node, const char *text, char *err, size_t errlen)
{
#ifdef SYS_mbind
    unsigned long mask[16] = {0};
    if (node < 0 || node >= (int)(8 * sizeof mask))
        return cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool %s: node %d is beyond %d", text, node, (int)(8 * sizeof mask));
    mask[node / (8 * sizeof(unsigned long))] = 1UL << (node % (8 * sizeof(unsigned long)));
    if (syscall(SYS_mbind, addr, (unsigned long)length, 2 /* MPOL_BIND */, mask,
                (unsigned long)(8 * sizeof mask), 1u | 2u /* STRICT | MOVE */) != 0)
        return cxl_pool_fail(err, errlen, CXL_POOL_ERUN, "pool %s: mbind failed: %s", text, strerror(errno));
    return CXL_POOL_OK;
#else
    (void)addr; (void)length; (void)node;
    return cxl_pool_fail(err, errlen, CXL_POOL_ERUN, "pool %s: mbind is not available on this architecture", text);
#endif
}

#endif
