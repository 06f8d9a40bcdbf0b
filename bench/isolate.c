/*
 * isolate.c -- running one repetition in a child process and carrying its
 * metrics back through a pipe, one "m NAME VALUE" or "e MESSAGE" line each.
 */
#include "isolate.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NAME_MAX_LEN 48
#define NAMES 64

/* Metric names outlive the child: keep one copy of each here. */
static const char *intern(const char *name)
{
    static char names[NAMES][NAME_MAX_LEN];
    static unsigned used;
    for (unsigned i = 0; i < used; i++) {
        if (strcmp(names[i], name) == 0)
            return names[i];
    }
    if (used == NAMES)
        return NULL;
    snprintf(names[used], NAME_MAX_LEN, "%.*s", NAME_MAX_LEN - 1, name);
    return names[used++];
}

static void parse_line(char *line, bench_metrics *out, char *error, size_t error_len)
{
    if (line[0] == 'e' && line[1] == ' ') {
        snprintf(error, error_len, "%.*s", (int)error_len - 1, line + 2);
    } else if (line[0] == 'm' && line[1] == ' ') {
        char *name = line + 2, *sp = strchr(name, ' ');
        if (!sp)
            return;
        *sp = 0;
        const char *kept = intern(name);
        if (kept)
            bench_metric(out, kept, strtod(sp + 1, NULL));
    }
}

int isolate_run(char *const argv[], bench_metrics *out)
{
    char error[256] = "", fdarg[16], buf[8192];
    size_t have = 0;
    int fds[2], status = 0;
    unsigned argc = 0;

    while (argv[argc])
        argc++;
    char **args = calloc(argc + 3, sizeof *args);
    if (!args || pipe(fds) != 0) {
        free(args);
        bench_fail("cannot start a child process");
        return -1;
    }
    memcpy(args, argv, argc * sizeof *args);
    snprintf(fdarg, sizeof fdarg, "%d", fds[1]);
    args[argc] = "--child-fd";
    args[argc + 1] = fdarg;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        execv("/proc/self/exe", args);
        _exit(127);
    }
    free(args);
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        bench_fail("fork failed");
        return -1;
    }
    memset(out, 0, sizeof *out);
    for (;;) {
        ssize_t got = read(fds[0], buf + have, sizeof buf - 1 - have);
        if (got <= 0)
            break;
        have += (size_t)got;
        buf[have] = 0;
        char *nl;
        while ((nl = strchr(buf, '\n'))) {
            *nl = 0;
            parse_line(buf, out, error, sizeof error);
            have -= (size_t)(nl + 1 - buf);
            memmove(buf, nl + 1, have + 1);
        }
        if (have == sizeof buf - 1)
            have = 0;                  /* an overlong line: drop it */
    }
    close(fds[0]);
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (!error[0]) {
        if (WIFSIGNALED(status))
            snprintf(error, sizeof error, "child killed by signal %d", WTERMSIG(status));
        else
            snprintf(error, sizeof error, "child exited with status %d", WEXITSTATUS(status));
    }
    bench_fail("%s", error);
    return -1;
}

int isolate_report(int fd, int rc, const bench_metrics *m)
{
    FILE *f = fdopen(fd, "w");
    if (!f)
        return 3;
    if (rc != 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", bench_error());
        for (char *c = msg; *c; c++) {
            if (*c == '\n')
                *c = ' ';
        }
        fprintf(f, "e %s\n", msg);
    } else {
        for (unsigned i = 0; i < m->n; i++)
            fprintf(f, "m %s %.17g\n", m->name[i], m->value[i]);
    }
    return fclose(f) == 0 && rc == 0 ? 0 : 1;
}
