/*
 * plock.c -- the lock between processes (util/plock.h): processes that
 * share an anonymous mapping exclude each other; a holder killed with
 * SIGKILL inside its section is found dead by a waiter within a bounded
 * time, and exactly one waiter takes the lock over and is told so; a live
 * holder that is merely slow is never taken over from.
 */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "util/plock.h"

typedef struct shared {
    uint64_t lock;
    uint64_t counter;       /* changed only under the lock, non-atomically */
    uint64_t taken;         /* takeovers seen by the waiters (atomic) */
    uint64_t holding;       /* pid of a holder that waits to be killed */
    uint64_t taken_after_ns; /* how long the takeover took after the kill */
    uint64_t killed_at_ns;
} shared;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A process is dead once it has exited (a zombie, not yet reaped, counts). */
static int pid_dead(void *ctx, uint64_t who)
{
    (void)ctx;
    char path[64], state = 0;
    snprintf(path, sizeof(path), "/proc/%llu/stat", (unsigned long long)who);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    int n = fscanf(f, "%*d (%*[^)]) %c", &state);
    fclose(f);
    return n == 1 && (state == 'Z' || state == 'X');
}

static shared *map_shared(void)
{
    void *p = mmap(NULL, sizeof(shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static ph_plock_owner me(void)
{
    return (ph_plock_owner){(uint64_t)getpid(), pid_dead, NULL};
}

TEST(processes_exclude_each_other)
{
    shared *s = map_shared();
    REQUIRE(s);
    enum { PROCS = 4, ROUNDS = 3000 };
    pid_t pid[PROCS];
    for (int i = 0; i < PROCS; i++) {
        if ((pid[i] = fork()) == 0) {
            ph_plock_owner o = me();
            int bad = 0;
            for (int k = 0; k < ROUNDS; k++) {
                bad |= ph_plock_lock(&s->lock, &o) != 0;
                uint64_t v = s->counter;
                if (k % 64 == 0)
                    sched_yield(); /* a holder preempted inside its section */
                __atomic_store_n(&s->counter, v + 1, __ATOMIC_RELAXED);
                ph_plock_unlock(&s->lock);
            }
            _exit(bad);
        }
        REQUIRE(pid[i] > 0);
    }
    for (int i = 0; i < PROCS; i++) {
        int st;
        REQUIRE(waitpid(pid[i], &st, 0) == pid[i]);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    CHECK_EQ(s->counter, PROCS * ROUNDS);
    CHECK_EQ(s->lock, 0);
    munmap(s, sizeof(*s));
}

TEST(a_dead_holder_is_taken_over_once)
{
    shared *s = map_shared();
    REQUIRE(s);
    pid_t holder = fork();
    if (holder == 0) {
        ph_plock_owner o = me();
        ph_plock_lock(&s->lock, &o);
        __atomic_store_n(&s->holding, (uint64_t)getpid(), __ATOMIC_RELEASE);
        for (;;)
            pause(); /* killed inside its section */
    }
    REQUIRE(holder > 0);
    while (!__atomic_load_n(&s->holding, __ATOMIC_ACQUIRE))
        usleep(100);
    enum { WAITERS = 3 };
    pid_t w[WAITERS];
    for (int i = 0; i < WAITERS; i++) {
        if ((w[i] = fork()) == 0) {
            ph_plock_owner o = me();
            int rc = ph_plock_lock(&s->lock, &o);
            if (rc == PH_PLOCK_TAKEN) {
                __atomic_fetch_add(&s->taken, 1, __ATOMIC_RELAXED);
                s->taken_after_ns = now_ns() - s->killed_at_ns;
            }
            s->counter++;
            ph_plock_unlock(&s->lock);
            _exit(rc < 0);
        }
        REQUIRE(w[i] > 0);
    }
    usleep(20 * 1000); /* the waiters wait on a live holder: no takeover */
    CHECK_EQ(__atomic_load_n(&s->taken, __ATOMIC_RELAXED), 0);
    CHECK_EQ(s->counter, 0);
    s->killed_at_ns = now_ns();
    kill(holder, SIGKILL); /* left unreaped: a zombie until the end */
    for (int i = 0; i < WAITERS; i++) {
        int st;
        REQUIRE(waitpid(w[i], &st, 0) == w[i]);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    fprintf(stderr, "  taken over %.1f ms after the kill\n", s->taken_after_ns / 1e6);
    CHECK_EQ(s->taken, 1);
    CHECK_EQ(s->counter, WAITERS);
    CHECK(s->taken_after_ns < 2000u * 1000u * 1000u); /* bounded (1 ms checks; a busy machine) */
    CHECK_EQ(s->lock, 0);
    waitpid(holder, NULL, 0);
    munmap(s, sizeof(*s));
}

/* A holder that keeps the lock for long while alive keeps it. */
TEST(a_slow_live_holder_keeps_it)
{
    shared *s = map_shared();
    REQUIRE(s);
    ph_plock_owner o = me();
    REQUIRE(ph_plock_lock(&s->lock, &o) == 0);
    pid_t w = fork();
    if (w == 0) {
        ph_plock_owner mine = me();
        int rc = ph_plock_lock(&s->lock, &mine);
        s->taken = rc == PH_PLOCK_TAKEN;
        s->counter = 1;
        ph_plock_unlock(&s->lock);
        _exit(0);
    }
    REQUIRE(w > 0);
    usleep(50 * 1000); /* 50 checks of this live process */
    CHECK_EQ(s->counter, 0);
    ph_plock_unlock(&s->lock);
    REQUIRE(waitpid(w, NULL, 0) == w);
    CHECK_EQ(s->counter, 1);
    CHECK_EQ(s->taken, 0);
    munmap(s, sizeof(*s));
}
