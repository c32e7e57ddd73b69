// LD_PRELOAD shim for tests/test_classes.cpp (issue 26, the environment errno sweep): makes the
// opens and reads of one file fail with a chosen errno, so that the test can check how the CLI
// classifies each errno (environment: exit 75, nothing recorded; the input's own problem: exit 3,
// the other inputs still processed).
//
//   MIMI_FAULT_ERRNO=N     the errno to fail with (a number); unset or 0: the shim does nothing
//   MIMI_FAULT_PATH=S      fail only for paths containing S (opens), and for the descriptors that
//                          were opened on such a path (reads). S ending in '$' ("b.mimi$"): only
//                          paths that end in S at a name boundary (b.mimi, dir/b.mimi; not the
//                          cache file weights-...1b.mimipw, whose hash can hold "b.mimi")
//   MIMI_FAULT_OP=open|read|any|rename|stat   which calls fail [default: any: opens and reads];
//                          rename: rename, renameat, renameat2 whose *destination* matches;
//                          stat: stat, lstat (and their 64 forms) of a matching path (a folder
//                          without search permission, seen as a user other than root)
//   MIMI_FAULT_SIGNAL=N    instead of failing the call, raise signal N in it, then (if the
//                          process lives on: a handler that returns) let the call go on
//   MIMI_FAULT_AFTER=N     let the first N matching calls pass [default: 0]
//   MIMI_FAULT_LOG=FILE    append one line per injected failure ("open PATH" / "read FD")
//
// Interposed: open, open64, openat, openat64 (and their _FORTIFY_SOURCE forms __open_2, ...),
// fopen, fopen64, freopen (glibc's fopen opens through an internal openat that LD_PRELOAD cannot
// reach, so fopen itself is interposed), read, pread, pread64, readv, preadv (and __read_chk,
// __pread_chk, __pread64_chk), close and fclose (to forget a descriptor). fread/getc on a FILE*
// read through glibc-internal calls that no preload can see: a FILE* opened on a faulted path
// fails at fopen (op open) but not at fread (op read) — see escapes in the test's report.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FD 65536

static int g_errno = 0;           // 0: inactive
static const char* g_path = NULL;
static int g_open = 1, g_read = 1, g_rename = 0, g_stat = 0;
static int g_signal = 0;
static long g_after = 0;
static long g_seen = 0;           // matching calls so far (atomic)
static const char* g_log = NULL;
static unsigned char g_tracked[MAX_FD];  // fds opened on a matching path (atomic bytes)

static int (*real_open)(const char*, int, ...);
static int (*real_open64)(const char*, int, ...);
static int (*real_openat)(int, const char*, int, ...);
static int (*real_openat64)(int, const char*, int, ...);
static int (*real___open_2)(const char*, int);
static int (*real___open64_2)(const char*, int);
static int (*real___openat_2)(int, const char*, int);
static int (*real___openat64_2)(int, const char*, int);
static FILE* (*real_fopen)(const char*, const char*);
static FILE* (*real_fopen64)(const char*, const char*);
static FILE* (*real_freopen)(const char*, const char*, FILE*);
static ssize_t (*real_read)(int, void*, size_t);
static ssize_t (*real_pread)(int, void*, size_t, off_t);
static ssize_t (*real_pread64)(int, void*, size_t, off_t);
static ssize_t (*real_readv)(int, const struct iovec*, int);
static ssize_t (*real_preadv)(int, const struct iovec*, int, off_t);
static ssize_t (*real___read_chk)(int, void*, size_t, size_t);
static ssize_t (*real___pread_chk)(int, void*, size_t, off_t, size_t);
static ssize_t (*real___pread64_chk)(int, void*, size_t, off_t, size_t);
static int (*real_rename)(const char*, const char*);
static int (*real_renameat)(int, const char*, int, const char*);
static int (*real_renameat2)(int, const char*, int, const char*, unsigned);
static int (*real_stat)(const char*, struct stat*);
static int (*real_lstat)(const char*, struct stat*);
static int (*real_stat64)(const char*, struct stat64*);
static int (*real_lstat64)(const char*, struct stat64*);
static int (*real_close)(int);
static int (*real_fclose)(FILE*);

static void resolve(void) {
  static int done = 0;
  if (__atomic_load_n(&done, __ATOMIC_ACQUIRE)) return;
#define R(name) real_##name = (__typeof__(real_##name))dlsym(RTLD_NEXT, #name)
  R(open); R(open64); R(openat); R(openat64); R(__open_2); R(__open64_2); R(__openat_2); R(__openat64_2);
  R(fopen); R(fopen64); R(freopen); R(read); R(pread); R(pread64); R(readv); R(preadv);
  R(__read_chk); R(__pread_chk); R(__pread64_chk); R(close); R(fclose); R(rename); R(renameat); R(renameat2);
  R(stat); R(lstat); R(stat64); R(lstat64);
#undef R
  __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void init(void) {
  resolve();
  const char* e = getenv("MIMI_FAULT_ERRNO");
  g_errno = e ? atoi(e) : 0;
  const char* sg = getenv("MIMI_FAULT_SIGNAL");
  g_signal = sg ? atoi(sg) : 0;
  if (g_signal && !g_errno) g_errno = EIO;  // active; the errno is not used
  g_path = getenv("MIMI_FAULT_PATH");
  if (!g_path || !*g_path) g_errno = 0;
  const char* op = getenv("MIMI_FAULT_OP");
  if (op && strcmp(op, "open") == 0) g_read = 0;
  if (op && strcmp(op, "read") == 0) g_open = 0;
  if (op && strcmp(op, "rename") == 0) g_open = g_read = 0, g_rename = 1;
  if (op && strcmp(op, "stat") == 0) g_open = g_read = 0, g_stat = 1;
  const char* a = getenv("MIMI_FAULT_AFTER");
  g_after = a ? atol(a) : 0;
  g_log = getenv("MIMI_FAULT_LOG");
}

static void log_line(const char* what, const char* detail) {
  if (!g_log) return;
  // raw syscalls: neither recursion into the shim nor stdio
  const int fd = (int)syscall(SYS_openat, AT_FDCWD, g_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  char buf[4200];
  int n = snprintf(buf, sizeof buf, "%d %s %s\n", (int)getpid(), what, detail);
  if (n > (int)sizeof buf - 1) n = (int)sizeof buf - 1;
  if (n > 0) (void)syscall(SYS_write, fd, buf, (size_t)n);
  (void)syscall(SYS_close, fd);
}

static int path_matches(const char* path) {
  if (!g_errno || !path) return 0;
  const size_t n = strlen(g_path);
  if (g_path[n - 1] != '$') return strstr(path, g_path) != NULL;
  const size_t want = n - 1, have = strlen(path);  // anchored: path ends in S at a name boundary
  if (have < want || memcmp(path + have - want, g_path, want) != 0) return 0;
  return have == want || path[have - want - 1] == '/' || g_path[0] == '/';
}

// One matching call: fail it (1) unless it is among the first MIMI_FAULT_AFTER.
static int take(void) { return __atomic_add_fetch(&g_seen, 1, __ATOMIC_SEQ_CST) > g_after; }

// An injected fault: with MIMI_FAULT_SIGNAL the signal is raised and the call goes on (0);
// otherwise the call fails with MIMI_FAULT_ERRNO (1, errno set).
static int inject_fails(void) {
  if (g_signal) {
    raise(g_signal);
    return 0;
  }
  errno = g_errno;
  return 1;
}

static int fail_rename(const char* to) {
  if (!g_rename || !path_matches(to) || !take()) return 0;
  log_line("rename", to);
  return inject_fails();
}

static int fail_stat(const char* path) {
  if (!g_stat || !path_matches(path) || !take()) return 0;
  log_line("stat", path);
  return inject_fails();
}

static int fail_open(const char* path) {
  if (!g_open || !path_matches(path) || !take()) return 0;
  log_line("open", path);
  return inject_fails();
}

static void track(int fd, const char* path) {
  if (fd >= 0 && fd < MAX_FD) __atomic_store_n(&g_tracked[fd], (unsigned char)(path_matches(path) ? 1 : 0), __ATOMIC_SEQ_CST);
}
static void untrack(int fd) {
  if (fd >= 0 && fd < MAX_FD) __atomic_store_n(&g_tracked[fd], 0, __ATOMIC_SEQ_CST);
}

static int fail_read(int fd) {
  if (!g_errno || !g_read || fd < 0 || fd >= MAX_FD || !__atomic_load_n(&g_tracked[fd], __ATOMIC_SEQ_CST) || !take())
    return 0;
  char d[32];
  snprintf(d, sizeof d, "%d", fd);
  log_line("read", d);
  return inject_fails();
}

static mode_t mode_arg(int flags, va_list ap) {
  return (flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

#define OPEN_BODY(call)               \
  resolve();                          \
  if (fail_open(path)) return -1;     \
  const int fd = call;                \
  track(fd, path);                    \
  return fd;

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t m = mode_arg(flags, ap);
  va_end(ap);
  OPEN_BODY(real_open(path, flags, m))
}
int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t m = mode_arg(flags, ap);
  va_end(ap);
  OPEN_BODY(real_open64(path, flags, m))
}
int openat(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t m = mode_arg(flags, ap);
  va_end(ap);
  OPEN_BODY(real_openat(dirfd, path, flags, m))
}
int openat64(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t m = mode_arg(flags, ap);
  va_end(ap);
  OPEN_BODY(real_openat64(dirfd, path, flags, m))
}
int __open_2(const char* path, int flags) { OPEN_BODY(real___open_2(path, flags)) }
int __open64_2(const char* path, int flags) { OPEN_BODY(real___open64_2(path, flags)) }
int __openat_2(int dirfd, const char* path, int flags) { OPEN_BODY(real___openat_2(dirfd, path, flags)) }
int __openat64_2(int dirfd, const char* path, int flags) { OPEN_BODY(real___openat64_2(dirfd, path, flags)) }

#define FOPEN_BODY(call)              \
  resolve();                          \
  if (fail_open(path)) return NULL;   \
  FILE* f = call;                     \
  if (f) track(fileno(f), path);      \
  return f;

FILE* fopen(const char* path, const char* mode) { FOPEN_BODY(real_fopen(path, mode)) }
FILE* fopen64(const char* path, const char* mode) { FOPEN_BODY(real_fopen64(path, mode)) }
FILE* freopen(const char* path, const char* mode, FILE* old) {
  resolve();
  if (old) untrack(fileno(old));
  FOPEN_BODY(real_freopen(path, mode, old))
}

#define READ_BODY(call)               \
  resolve();                          \
  if (fail_read(fd)) return -1;      \
  return call;

ssize_t read(int fd, void* buf, size_t n) { READ_BODY(real_read(fd, buf, n)) }
ssize_t pread(int fd, void* buf, size_t n, off_t off) { READ_BODY(real_pread(fd, buf, n, off)) }
ssize_t pread64(int fd, void* buf, size_t n, off_t off) { READ_BODY(real_pread64(fd, buf, n, off)) }
ssize_t readv(int fd, const struct iovec* iov, int cnt) { READ_BODY(real_readv(fd, iov, cnt)) }
ssize_t preadv(int fd, const struct iovec* iov, int cnt, off_t off) { READ_BODY(real_preadv(fd, iov, cnt, off)) }
ssize_t __read_chk(int fd, void* buf, size_t n, size_t len) { READ_BODY(real___read_chk(fd, buf, n, len)) }
ssize_t __pread_chk(int fd, void* buf, size_t n, off_t off, size_t len) {
  READ_BODY(real___pread_chk(fd, buf, n, off, len))
}
ssize_t __pread64_chk(int fd, void* buf, size_t n, off_t off, size_t len) {
  READ_BODY(real___pread64_chk(fd, buf, n, off, len))
}

int rename(const char* from, const char* to) {
  resolve();
  return fail_rename(to) ? -1 : real_rename(from, to);
}
int renameat(int fd1, const char* from, int fd2, const char* to) {
  resolve();
  return fail_rename(to) ? -1 : real_renameat(fd1, from, fd2, to);
}
int renameat2(int fd1, const char* from, int fd2, const char* to, unsigned flags) {
  resolve();
  return fail_rename(to) ? -1 : real_renameat2(fd1, from, fd2, to, flags);
}

int close(int fd) {
  resolve();
  untrack(fd);
  return real_close(fd);
}
int fclose(FILE* f) {
  resolve();
  if (f) untrack(fileno(f));
  return real_fclose(f);
}

int stat(const char* path, struct stat* st) {
  resolve();
  if (fail_stat(path)) return -1;
  return real_stat(path, st);
}
int lstat(const char* path, struct stat* st) {
  resolve();
  if (fail_stat(path)) return -1;
  return real_lstat(path, st);
}
int stat64(const char* path, struct stat64* st) {
  resolve();
  if (fail_stat(path)) return -1;
  return real_stat64(path, st);
}
int lstat64(const char* path, struct stat64* st) {
  resolve();
  if (fail_stat(path)) return -1;
  return real_lstat64(path, st);
}
