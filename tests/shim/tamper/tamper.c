/*
 * tamper.c - what a hostile tenant tries against its slice from inside its
 * container, knowing nothing of the region's layout: in every file given it
 * looks for the slice's numbers (the memory limit as 8 bytes, the SM share in
 * parts per million as 4 bytes, little-endian, aligned) and overwrites each
 * with a bigger one, in every way it can think of.  One JSON line per file and
 * way; "errno" 0 means the way worked, "replaced" counts the numbers changed.
 *
 *   tamper OLD_LIMIT NEW_LIMIT OLD_PPM NEW_PPM FILE...
 *
 * Ways: "write" (open read-write, pwrite), "mmap" (a shared writable mapping
 * of a read-only descriptor, then of a read-write one), "chmod" (make it
 * writable, then write), "rename" (a doctored copy renamed over it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t g_old_limit, g_new_limit;
static uint32_t g_old_ppm, g_new_ppm;

static void report(const char *file, const char *way, int err, int replaced) {
    printf("{\"file\":\"%s\",\"way\":\"%s\",\"errno\":%d,\"replaced\":%d}\n", file, way, err,
           replaced);
    fflush(stdout);
}

/* Replace the slice's numbers in buf (len bytes); how many were replaced. */
static int doctor(unsigned char *buf, size_t len) {
    int n = 0;
    for (size_t off = 0; off + 8 <= len; off += 8) {
        uint64_t v;
        memcpy(&v, buf + off, 8);
        if (v == g_old_limit) {
            memcpy(buf + off, &g_new_limit, 8);
            n++;
        }
    }
    for (size_t off = 0; off + 4 <= len; off += 4) {
        uint32_t v;
        memcpy(&v, buf + off, 4);
        if (v == g_old_ppm) {
            memcpy(buf + off, &g_new_ppm, 4);
            n++;
        }
    }
    return n;
}

/* The whole file, malloc'd, its size in *len; NULL with errno set. */
static unsigned char *slurp(const char *file, size_t *len) {
    int fd = open(file, O_RDONLY);
    if (fd < 0)
        return NULL;
    struct stat st;
    unsigned char *buf = NULL;
    if (fstat(fd, &st) == 0 && (buf = malloc((size_t)st.st_size + 1)) != NULL &&
        pread(fd, buf, (size_t)st.st_size, 0) != st.st_size) {
        free(buf);
        buf = NULL;
        errno = EIO;
    }
    *len = (size_t)st.st_size;
    int saved = errno;
    close(fd);
    errno = saved;
    return buf;
}

/* The file's bytes doctored, written whole through fd (closed); 0 or an errno. */
static int put_doctored(int fd, const char *file, int *replaced) {
    size_t len;
    unsigned char *buf = slurp(file, &len);
    int err = buf ? 0 : errno;
    if (buf) {
        *replaced = doctor(buf, len);
        if (pwrite(fd, buf, len, 0) != (ssize_t)len)
            err = errno;
        free(buf);
    }
    close(fd);
    return err;
}

/* Doctor the file through a read-write descriptor. */
static int by_write(const char *file, int *replaced) {
    int fd = open(file, O_RDWR);
    return fd < 0 ? errno : put_doctored(fd, file, replaced);
}

/* Doctor the file through a shared writable mapping of a descriptor opened with flags. */
static int by_mmap(const char *file, int flags, int *replaced) {
    int fd = open(file, flags);
    if (fd < 0)
        return errno;
    struct stat st;
    int err = fstat(fd, &st) != 0 ? errno : st.st_size == 0 ? EINVAL : 0;
    if (err) {
        close(fd);
        return err;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        err = errno;
    } else {
        *replaced = doctor(m, (size_t)st.st_size);
        munmap(m, (size_t)st.st_size);
    }
    close(fd);
    return err;
}

/* A doctored copy beside the file, renamed over it. */
static int by_rename(const char *file, int *replaced) {
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.evil", file);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0)
        return errno;
    int n = 0;
    int err = put_doctored(fd, file, &n);
    if (!err && rename(tmp, file) != 0)
        err = errno;
    if (!err)
        *replaced = n;
    unlink(tmp);
    return err;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: tamper OLD_LIMIT NEW_LIMIT OLD_PPM NEW_PPM FILE...\n");
        return 2;
    }
    g_old_limit = strtoull(argv[1], NULL, 10);
    g_new_limit = strtoull(argv[2], NULL, 10);
    g_old_ppm = (uint32_t)strtoul(argv[3], NULL, 10);
    g_new_ppm = (uint32_t)strtoul(argv[4], NULL, 10);
    for (int i = 5; i < argc; i++) {
        const char *f = argv[i];
        int n = 0, err;
        err = by_write(f, &n);
        report(f, "write", err, n);
        n = 0;
        err = by_mmap(f, O_RDONLY, &n);
        report(f, "mmap-readonly-fd", err, n);
        n = 0;
        err = by_mmap(f, O_RDWR, &n);
        report(f, "mmap", err, n);
        n = 0;
        err = chmod(f, 0666) != 0 ? errno : by_write(f, &n);
        report(f, "chmod", err, n);
        n = 0;
        err = by_rename(f, &n);
        report(f, "rename", err, n);
    }
    return 0;
}
