/* cxl_pool.h: creating, attaching and removing an emulated CXL pool segment.
 *
 * A pool is one shared mapping every local rank attaches to. This header is the one
 * definition of its byte layout, for the MPI interposition library (cxlsim/mpi) and the
 * Python twin (pool.py's SegmentLayout) alike. Header-only (static functions), no
 * dependencies beyond libc and Linux system calls.
 *
 * The backends (shm, file:PATH, dax:PATH, numa:N) are parsed and checked in
 * cxl_pool_backends.h; shm and numa segments, and a file:PATH that does not exist, are files
 * we create. A segment we create is unlinked as soon as every rank counted itself in (the last rank to
 * attach does it), so a run killed after start-up leaves nothing behind;
 * cxl_pool_sweep_stale removes segments whose owner process is dead.
 *
 * Layout (bytes from the start; every flag and slot on its own 64-byte lines):
 *   0     header: magic u64, version u32, nranks u32, slot_bytes, slot_stride, flags_offset,
 *         data_offset, total_bytes, owner pid (u64 each), little-endian; magic written last
 *   64    attach counter (u32, atomic)
 *   128   job nonce (u64): the MPI library's rank 0 writes a random one after the header, and every rank checks
 *         it (0 in a pool of the Python twin, which zeroes the page); the pool's epochs start from a base
 *         drawn from it (cxl_coll_start_epochs), so nothing an earlier job left is taken for an arrival
 *   4096  flag lines: rank r's flag (u64) at flags_offset + 64 r, single writer
 *   ...   data: buffer b (0 or 1), slot r at data_offset + (b nranks + r) slot_stride
 *   ...   inline area: rank r's CXL_POOL_INLINE_AREA_BYTES at inline_offset + r x that, single
 *         writer (the line-flag allreduce of cxl_coll_reduce.h; inline_offset = data_offset +
 *         2 nranks slot_stride)
 *
 * Shared pools (cxl_segment_map_shared): one file: or dax: memory that every host of a job maps under its own
 * path (real CXL 3 memory shared by hosts, QEMU's multi-host CXL, or one file for fake nodes). Nothing is created,
 * grown or removed there; a pool is a region at an offset of it (aligned as above) that the caller chose, with
 * the layout above from the region's start. Who may use which region is the caller's (cxlsim/mpi/pools.c).
 *
 * Functions return CXL_POOL_OK, or CXL_POOL_EINPUT (the spec or the sizes are bad: the
 * user's input) or CXL_POOL_ERUN (the system refused), with a message in err naming
 * the pool and what was expected.
 */
#ifndef CXLSIM_CXL_POOL_H
#define CXLSIM_CXL_POOL_H

#include "cxl_pool_backends.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/statvfs.h>

#define CXL_POOL_MAGIC 0x43584C53494D5031ULL /* "CXLSIMP1" */
#define CXL_POOL_VERSION 2u
#define CXL_POOL_LINE 64u
#define CXL_POOL_PAGE 4096u
#define CXL_POOL_DAX_ALIGN (2u << 20)
#define CXL_POOL_ATTACH_OFFSET 64u
#define CXL_POOL_HEADER_BYTES 64u
#define CXL_POOL_NONCE_OFFSET 128u
#define CXL_POOL_SHM_DIR "/dev/shm"
#define CXL_POOL_PREFIX "cxlsim-"
/* Bytes of one rank's inline area: 2 halves x 10 lines (= 2 x CXL_COLL_LINES_PER_HALF x 64 in
 * cxl_coll_reduce.h, which checks it when both headers are included). */
#define CXL_POOL_INLINE_AREA_BYTES 1280u

/* Byte layout of a pool for nranks ranks with slots of slot_bytes (see the header comment). */
typedef struct {
    uint32_t nranks;
    uint64_t slot_bytes;   /* usable bytes per slot */
    uint64_t slot_stride;  /* bytes between slots: slot_bytes rounded up to 64, at least 64 */
    uint64_t flags_offset; /* 4096 */
    uint64_t data_offset;  /* flags_offset + nranks x 64 rounded up to 4096 */
    uint64_t inline_offset;/* data_offset + 2 nranks slot_stride */
    uint64_t total_bytes;  /* inline_offset + nranks x CXL_POOL_INLINE_AREA_BYTES, rounded up to the alignment */
} cxl_layout_t;

/* A mapped segment. */
typedef struct {
    char *base;
    cxl_layout_t layout;
    char path[CXL_POOL_PATH_MAX];
    int temporary;  /* we created the file: it is unlinked once every rank is in */
    int lock_fd_plus1; /* file pools: the creator's descriptor holding the file's lock, + 1 (0: none) */
} cxl_segment_t;

static inline uint64_t cxl_pool_round_up(uint64_t value, uint64_t multiple)
{
    return (value + multiple - 1) / multiple * multiple;
}

/* Plan the layout; align is CXL_POOL_PAGE, or CXL_POOL_DAX_ALIGN on dax. */
static int cxl_layout_plan(uint32_t nranks, uint64_t slot_bytes, uint64_t align, cxl_layout_t *out,
                           char *err, size_t errlen)
{
    if (nranks < 1) return cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "nranks: expected 1 or more, got %u", nranks);
    if (slot_bytes > (UINT64_C(1) << 40) / nranks)
        return cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "slot_bytes: %llu x %u ranks exceeds 1 TiB",
                             (unsigned long long)slot_bytes, nranks);
    out->nranks = nranks;
    out->slot_bytes = slot_bytes;
    out->slot_stride = slot_bytes < CXL_POOL_LINE ? CXL_POOL_LINE : cxl_pool_round_up(slot_bytes, CXL_POOL_LINE);
    out->flags_offset = CXL_POOL_PAGE;
    out->data_offset = out->flags_offset + cxl_pool_round_up((uint64_t)nranks * CXL_POOL_LINE, CXL_POOL_PAGE);
    out->inline_offset = out->data_offset + 2 * (uint64_t)nranks * out->slot_stride;
    out->total_bytes = cxl_pool_round_up(out->inline_offset + (uint64_t)nranks * CXL_POOL_INLINE_AREA_BYTES, align);
    return CXL_POOL_OK;
}

static int cxl_pool_pid_alive(long pid)
{
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* Remove cxlsim segments in dir whose owner process is dead (never a live run's); returns how many. */
static int cxl_pool_sweep_stale(const char *dir)
{
    DIR *d = opendir(dir);
    int removed = 0;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) {
        const char *name = e->d_name, *p = name + strlen(CXL_POOL_PREFIX);
        if (strncmp(name, CXL_POOL_PREFIX, strlen(CXL_POOL_PREFIX)) != 0) continue;
        char *end;
        long pid = strtol(p, &end, 10);
        if (end == p || *end != '-' || !end[1] || end[1 + strspn(end + 1, "0123456789abcdef")]) continue;
        if (cxl_pool_pid_alive(pid)) continue;
        char path[CXL_POOL_PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (unlink(path) == 0) removed++;
    }
    closedir(d);
    return removed;
}

static void cxl_pool_write_header(cxl_segment_t *seg)
{
    const cxl_layout_t *lay = &seg->layout;
    char *b = seg->base;
    memset(b, 0, lay->data_offset); /* header, attach counter, flags */
    uint32_t version = CXL_POOL_VERSION, nranks = lay->nranks;
    uint64_t fields[6] = {lay->slot_bytes, lay->slot_stride, lay->flags_offset, lay->data_offset, lay->total_bytes,
                          (uint64_t)getpid()};
    memcpy(b + 8, &version, 4);
    memcpy(b + 12, &nranks, 4);
    memcpy(b + 16, fields, sizeof fields);
    __atomic_store_n((uint64_t *)b, CXL_POOL_MAGIC, __ATOMIC_RELEASE); /* last: a valid magic means a complete header */
}

static int cxl_pool_check_header(const cxl_segment_t *seg, char *err, size_t errlen)
{
    const char *b = seg->base;
    const cxl_layout_t *lay = &seg->layout;
    uint64_t magic = __atomic_load_n((const uint64_t *)b, __ATOMIC_ACQUIRE), fields[6];
    uint32_t version, nranks;
    memcpy(&version, b + 8, 4);
    memcpy(&nranks, b + 12, 4);
    memcpy(fields, b + 16, sizeof fields);
    if (magic != CXL_POOL_MAGIC)
        return cxl_pool_fail(err, errlen, CXL_POOL_ERUN, "pool %s: bad magic %#llx (not a cxlsim pool, or not "
                             "initialised)", seg->path, (unsigned long long)magic);
    if (version != CXL_POOL_VERSION)
        return cxl_pool_fail(err, errlen, CXL_POOL_ERUN, "pool %s: layout version %u, this cxlsim reads %u",
                             seg->path, version, CXL_POOL_VERSION);
    if (nranks != lay->nranks || fields[0] != lay->slot_bytes || fields[1] != lay->slot_stride ||
        fields[2] != lay->flags_offset || fields[3] != lay->data_offset || fields[4] != lay->total_bytes)
        return cxl_pool_fail(err, errlen, CXL_POOL_ERUN, "pool %s: header says %u ranks x %llu B, expected %u x %llu B",
                             seg->path, nranks, (unsigned long long)fields[0], lay->nranks,
                             (unsigned long long)lay->slot_bytes);
    return CXL_POOL_OK;
}

static int cxl_pool_map(cxl_segment_t *seg, int fd, char *err, size_t errlen)
{
    void *m = mmap(NULL, seg->layout.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return cxl_pool_fail(err, errlen, CXL_POOL_ERUN, "pool %s: mmap of %llu bytes failed: %s", seg->path,
                             (unsigned long long)seg->layout.total_bytes, strerror(errno));
    seg->base = (char *)m;
    return CXL_POOL_OK;
}

/* Allocate every byte now, so running out of room is an error here, not a SIGBUS later. */
static int cxl_pool_reserve(int fd, const cxl_segment_t *seg, const char *text, char *err, size_t errlen)
{
    int rc = posix_fallocate(fd, 0, (off_t)seg->layout.total_bytes);
    if (rc == 0) return CXL_POOL_OK;
    if (rc == ENOSPC || rc == EFBIG || rc == ENOMEM) {
        char dir[CXL_POOL_PATH_MAX];
        snprintf(dir, sizeof dir, "%s", seg->path);
        if (strrchr(dir, '/')) *strrchr(dir, '/') = 0;
        struct statvfs vfs;
        long long free_bytes = statvfs(dir, &vfs) == 0 ? (long long)vfs.f_bavail * (long long)vfs.f_frsize : -1;
        return cxl_pool_fail(err, errlen, CXL_POOL_ERUN, "pool %s: no room for a %llu-byte pool in %s (%lld bytes "
                             "free): free space there, use smaller slots or fewer ranks, or a file:PATH pool",
                             text, (unsigned long long)seg->layout.total_bytes, dir, free_bytes);
    }
    return cxl_pool_fail(err, errlen, CXL_POOL_ERUN, "pool %s: cannot allocate %llu bytes for %s: %s", text,
                         (unsigned long long)seg->layout.total_bytes, seg->path, strerror(rc));
}

/* Open an existing file or device that must hold total_bytes (a short regular file of a
 * file: pool is grown). Returns the fd or -1 with err set. */
static int cxl_pool_open_existing(const cxl_pool_spec_t *spec, const cxl_segment_t *seg, char *err, size_t errlen)
{
    int fd = open(seg->path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool %s: cannot open %s: %s", spec->text, seg->path, strerror(errno));
        return -1;
    }
    struct stat st;
    fstat(fd, &st);
    long long size = S_ISREG(st.st_mode) ? (long long)st.st_size : cxl_pool_dax_device_size(&st);
    if (size >= 0 && (uint64_t)size < seg->layout.total_bytes) {
        if (S_ISREG(st.st_mode) && spec->kind == CXL_POOL_FILE) {
            if (ftruncate(fd, (off_t)seg->layout.total_bytes) == 0) return fd;
            cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool %s: cannot grow %s to %llu bytes: %s", spec->text,
                          seg->path, (unsigned long long)seg->layout.total_bytes, strerror(errno));
        } else {
            cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool %s: %s has %lld bytes but the pool needs %llu", spec->text,
                          seg->path, size, (unsigned long long)seg->layout.total_bytes);
        }
        close(fd);
        return -1;
    }
    return fd;
}

/* A fresh file beside seg->path (PATH.<pid>-<12 hex digits>), created for this pool alone: a file
 * pool whose file another live pool holds (its creator keeps a lock on it) gets one instead.
 * Returns its descriptor, or -1 with errno set. */
static int cxl_pool_sibling(cxl_segment_t *seg)
{
    unsigned char rnd[6];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) return -1;
    char base[CXL_POOL_PATH_MAX];
    snprintf(base, sizeof base, "%s", seg->path);
    int n = snprintf(seg->path, sizeof seg->path, "%s.%ld-%02x%02x%02x%02x%02x%02x", base, (long)getpid(), rnd[0],
                     rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
    if (n < 0 || (size_t)n >= sizeof seg->path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    seg->temporary = 1;
    return open(seg->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
}

/* Create, map and initialise a pool for nranks ranks with slot_bytes per slot. The creator is
 * not counted in: every rank (the creator's own rank too) calls cxl_segment_count_in. */
static int cxl_segment_create(const cxl_pool_spec_t *spec, uint32_t nranks, uint64_t slot_bytes, cxl_segment_t *seg,
                              char *err, size_t errlen)
{
    memset(seg, 0, sizeof *seg);
    int rc = cxl_layout_plan(nranks, slot_bytes, spec->kind == CXL_POOL_DAX ? CXL_POOL_DAX_ALIGN : CXL_POOL_PAGE,
                             &seg->layout, err, errlen);
    if (rc) return rc;
    int fd;
    if (spec->kind == CXL_POOL_SHM || spec->kind == CXL_POOL_NUMA) {
        if (spec->kind == CXL_POOL_NUMA && (rc = cxl_pool_check_numa_node(spec, err, errlen))) return rc;
        cxl_pool_sweep_stale(CXL_POOL_SHM_DIR);
        unsigned char rnd[6];
        if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
            return cxl_pool_fail(err, errlen, CXL_POOL_ERUN, "pool %s: getrandom failed: %s", spec->text, strerror(errno));
        snprintf(seg->path, sizeof seg->path, "%s/%s%ld-%02x%02x%02x%02x%02x%02x", CXL_POOL_SHM_DIR, CXL_POOL_PREFIX,
                 (long)getpid(), rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
        seg->temporary = 1;
    } else {
        if (spec->kind == CXL_POOL_DAX && (rc = cxl_pool_check_dax(spec, err, errlen))) return rc;
        if (!realpath(spec->path, seg->path)) {
            if (spec->kind == CXL_POOL_DAX || errno != ENOENT)
                return cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool %s: %s", spec->text, strerror(errno));
            if (spec->path[0] == '/' || !getcwd(seg->path, sizeof seg->path)) seg->path[0] = 0;
            size_t used = strlen(seg->path);
            snprintf(seg->path + used, sizeof seg->path - used, "%s%s", used ? "/" : "", spec->path);
            seg->temporary = 1;
        }
    }
    if (seg->temporary) {
        fd = open(seg->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && errno == EEXIST && spec->kind == CXL_POOL_FILE) fd = cxl_pool_sibling(seg);
        if (fd < 0)
            return cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool %s: cannot create %s: %s", spec->text, seg->path,
                                 strerror(errno));
    } else if ((fd = cxl_pool_open_existing(spec, seg, err, errlen)) < 0) {
        return CXL_POOL_EINPUT;
    }
    if (spec->kind == CXL_POOL_FILE && flock(fd, LOCK_EX | LOCK_NB) != 0) {
        /* another live pool (another communicator, or another job) holds this file: never share it */
        close(fd);
        if ((fd = cxl_pool_sibling(seg)) < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0)
            return cxl_pool_fail(err, errlen, CXL_POOL_ERUN, "pool %s: %s is in use, and so is a file beside it: %s",
                                 spec->text, seg->path, strerror(errno));
    }
    if (seg->temporary && ftruncate(fd, (off_t)seg->layout.total_bytes) != 0)
        rc = cxl_pool_fail(err, errlen, CXL_POOL_ERUN, "pool %s: cannot size %s: %s", spec->text, seg->path,
                           strerror(errno));
    if (!rc) rc = cxl_pool_map(seg, fd, err, errlen);
    if (!rc && spec->kind == CXL_POOL_NUMA) /* before any page exists, so reserving places them on the node */
        rc = cxl_pool_mbind(seg->base, seg->layout.total_bytes, spec->numa_node, spec->text, err, errlen);
    if (!rc && seg->temporary) rc = cxl_pool_reserve(fd, seg, spec->text, err, errlen);
    if (!rc && spec->kind == CXL_POOL_FILE)
        seg->lock_fd_plus1 = fd + 1; /* held until cxl_segment_unmap */
    else
        close(fd);
    if (rc) {
        if (seg->base) munmap(seg->base, seg->layout.total_bytes);
        if (seg->temporary) unlink(seg->path);
        seg->base = NULL;
        return rc;
    }
    cxl_pool_write_header(seg);
    return CXL_POOL_OK;
}

/* Remove the backing file if we created it (idempotent). */
static void cxl_segment_unlink(const cxl_segment_t *seg)
{
    if (seg->temporary) unlink(seg->path);
}

/* Count this rank in; the rank that completes the count unlinks a temporary segment.
 * Returns the count after this rank's increment. */
static uint32_t cxl_segment_count_in(cxl_segment_t *seg)
{
    uint32_t n = __atomic_add_fetch((uint32_t *)(seg->base + CXL_POOL_ATTACH_OFFSET), 1u, __ATOMIC_ACQ_REL);
    if (n == seg->layout.nranks) cxl_segment_unlink(seg);
    return n;
}

/* Map an existing pool made by cxl_segment_create, check its header and count this rank in. */
static int cxl_segment_attach(const char *path, const cxl_layout_t *layout, int temporary, cxl_segment_t *seg,
                              char *err, size_t errlen)
{
    memset(seg, 0, sizeof *seg);
    seg->layout = *layout;
    seg->temporary = temporary;
    snprintf(seg->path, sizeof seg->path, "%s", path);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return cxl_pool_fail(err, errlen, CXL_POOL_ERUN, "pool %s is gone: %s (its creator exited, or every rank "
                             "already attached)", path, strerror(errno));
    struct stat st;
    fstat(fd, &st);
    int rc = CXL_POOL_OK;
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size < layout->total_bytes)
        rc = cxl_pool_fail(err, errlen, CXL_POOL_ERUN, "pool %s has %lld bytes, expected %llu", path,
                           (long long)st.st_size, (unsigned long long)layout->total_bytes);
    if (!rc) rc = cxl_pool_map(seg, fd, err, errlen);
    close(fd);
    if (!rc && (rc = cxl_pool_check_header(seg, err, errlen))) {
        munmap(seg->base, layout->total_bytes);
        seg->base = NULL;
    }
    if (!rc) cxl_segment_count_in(seg);
    return rc;
}

/* The job nonce (CXL_POOL_NONCE_OFFSET); set after cxl_pool_write_header, which zeroes it. */
static inline void cxl_pool_set_nonce(cxl_segment_t *seg, uint64_t nonce)
{
    __atomic_store_n((uint64_t *)(seg->base + CXL_POOL_NONCE_OFFSET), nonce, __ATOMIC_RELEASE);
}
static inline uint64_t cxl_pool_nonce(const cxl_segment_t *seg)
{
    return __atomic_load_n((const uint64_t *)(seg->base + CXL_POOL_NONCE_OFFSET), __ATOMIC_ACQUIRE);
}

/* Open a shared pool's file or device (file: or dax:, which must exist) and its size in bytes. Returns the
 * descriptor, or -1 with err set (CXL_POOL_EINPUT: it is not there, or not a shared kind). */
static int cxl_pool_open_shared(const cxl_pool_spec_t *spec, uint64_t *bytes, char *err, size_t errlen)
{
    if (spec->kind != CXL_POOL_FILE && spec->kind != CXL_POOL_DAX) {
        cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool %s: a shared pool is file:PATH or dax:PATH", spec->text);
        return -1;
    }
    if (spec->kind == CXL_POOL_DAX && cxl_pool_check_dax(spec, err, errlen)) return -1;
    int fd = open(spec->path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        cxl_pool_fail(err, errlen, CXL_POOL_EINPUT, "pool %s: cannot open %s: %s (a shared pool's memory must exist "
                      "on every host)", spec->text, spec->path, strerror(errno));
        return -1;
    }
    struct stat st;
    fstat(fd, &st);
    long long size = S_ISREG(st.st_mode) ? (long long)st.st_size : cxl_pool_dax_device_size(&st);
    *bytes = size > 0 ? (uint64_t)size : 0;
    return fd;
}

/* Map the region [offset, offset + layout->total_bytes) of a shared pool (offset aligned as the layout). Does not
 * read or write it: the creator then writes the header (cxl_pool_write_header, cxl_pool_set_nonce), the others
 * check it. CXL_POOL_ERUN if the memory is shorter than the region. */
static int cxl_segment_map_shared(const cxl_pool_spec_t *spec, const cxl_layout_t *layout, uint64_t offset,
                                  cxl_segment_t *seg, char *err, size_t errlen)
{
    memset(seg, 0, sizeof *seg);
    seg->layout = *layout;
    snprintf(seg->path, sizeof seg->path, "%s", spec->path);
    uint64_t bytes = 0;
    int fd = cxl_pool_open_shared(spec, &bytes, err, errlen);
    if (fd < 0) return CXL_POOL_EINPUT;
    int rc = CXL_POOL_OK;
    if (bytes < offset + layout->total_bytes)
        rc = cxl_pool_fail(err, errlen, CXL_POOL_ERUN, "pool %s: %s has %llu bytes, the region needs %llu at offset "
                           "%llu", spec->text, spec->path, (unsigned long long)bytes,
                           (unsigned long long)layout->total_bytes, (unsigned long long)offset);
    if (!rc) {
        void *m = mmap(NULL, layout->total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
        if (m == MAP_FAILED)
            rc = cxl_pool_fail(err, errlen, CXL_POOL_ERUN, "pool %s: mmap of %llu bytes at offset %llu failed: %s",
                               spec->text, (unsigned long long)layout->total_bytes, (unsigned long long)offset,
                               strerror(errno));
        else
            seg->base = (char *)m;
    }
    close(fd);
    return rc;
}

/* Unmap (idempotent). */
static void cxl_segment_unmap(cxl_segment_t *seg)
{
    if (seg->base) munmap(seg->base, seg->layout.total_bytes);
    seg->base = NULL;
    if (seg->lock_fd_plus1) close(seg->lock_fd_plus1 - 1);
    seg->lock_fd_plus1 = 0;
}

#endif
