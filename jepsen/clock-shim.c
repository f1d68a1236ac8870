// A server's wall clock that the fault harness can move forward (jepsen/clock.js builds
// this file with `cc` and preloads it into the server): every read of CLOCK_REALTIME through
// clock_gettime, gettimeofday or time gets the offset the harness last wrote to the file
// DEADBOLT_CLOCK_FILE (8 bytes, a little-endian int64 of milliseconds, read through a shared
// mapping, so a write moves the clock at once). The monotonic clocks are left alone, as a
// clock stepped by NTP or by hand leaves them.
//
// Not libfaketime: it cannot start redis-server 7.0 here (its jemalloc reads the clock while
// libfaketime is resolving the real functions, and libfaketime gives up on the recursion),
// and a PostgreSQL backend already running under it did not see its offset change. This shim
// resolves nothing: it asks the kernel itself (the clock_gettime system call), allocates
// nothing, and so runs under any allocator; a process forked after the first read (a
// PostgreSQL backend, Redis's AOF rewrite) inherits the mapping.

#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

// The mapped offset; NULL until mapped, MAP_FAILED when there is none to map.
static volatile int64_t *mapped;

static int64_t offset_ms(void) {
  volatile int64_t *p = __atomic_load_n(&mapped, __ATOMIC_ACQUIRE);
  if (p == NULL) {
    // Two threads may both map the file: each mapping shows the same bytes, one is kept.
    const char *path = getenv("DEADBOLT_CLOCK_FILE");
    void *m = MAP_FAILED;
    if (path != NULL) {
      int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        m = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
        syscall(SYS_close, fd);
      }
    }
    p = (volatile int64_t *)m;
    __atomic_store_n(&mapped, p, __ATOMIC_RELEASE);
  }
  if ((void *)p == MAP_FAILED) return 0;
  return *p;
}

static int real_clock(clockid_t clk, struct timespec *ts) {
  return (int)syscall(SYS_clock_gettime, clk, ts);
}

static void shift(struct timespec *ts) {
  int64_t ms = offset_ms();
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (ms % 1000) * 1000000;
  if (ts->tv_nsec >= 1000000000) {
    ts->tv_sec += 1;
    ts->tv_nsec -= 1000000000;
  }
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
  int r = real_clock(clk, ts);
  if (r == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE)) shift(ts);
  return r;
}

// glibc declares `tv` non-null; callers passing NULL exist all the same.
#pragma GCC diagnostic ignored "-Wnonnull-compare"
int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
  struct timespec ts;
  int r = real_clock(CLOCK_REALTIME, &ts);
  if (r != 0) return r;
  shift(&ts);
  if (tv != NULL) {
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
  }
  if (tz != NULL) {
    struct timezone *z = tz;
    z->tz_minuteswest = 0;
    z->tz_dsttime = 0;
  }
  return 0;
}

time_t time(time_t *t) {
  struct timespec ts;
  if (real_clock(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
  shift(&ts);
  if (t != NULL) *t = ts.tv_sec;
  return ts.tv_sec;
}
