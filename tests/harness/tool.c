/*
 * tool.c -- running a command-line program from a test and checking its
 * JSON output: the pieces the tests of the pheap tool share.
 */
#include <ctype.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* Reads the file into buf (NUL-terminated, cut at cap - 1 bytes); returns
 * the bytes read. */
static size_t slurp(const char *path, char *buf, size_t cap)
{
    buf[0] = '\0';
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 0;
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    close(fd);
    return n;
}

ph_tool_result *ph_test_run_tool(const char *prog, const char *arg, ...)
{
    static ph_tool_result r;
    const char *argv[32] = {prog};
    int argc = 1;
    va_list ap;
    va_start(ap, arg);
    for (const char *a = arg; a && argc < 31; a = va_arg(ap, const char *))
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;

    char out_path[512], err_path[512];
    snprintf(out_path, sizeof(out_path), "%s/tool.stdout", ph_test_dir());
    snprintf(err_path, sizeof(err_path), "%s/tool.stderr", ph_test_dir());
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(126);
        unsetenv("PHEAP_FLUSH");
        execv(prog, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    r.code = -1;
    if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status))
        r.code = WEXITSTATUS(status);
    r.out_len = slurp(out_path, r.out, sizeof(r.out));
    slurp(err_path, r.err, sizeof(r.err));
    return &r;
}

/* ---- a small JSON syntax checker ----------------------------------------- */

static const char *json_value(const char *p, int depth);

static const char *json_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

static const char *json_string(const char *p)
{
    if (*p++ != '"')
        return NULL;
    while (*p != '"') {
        unsigned char c = (unsigned char)*p;
        if (c == '\0' || c < 0x20)
            return NULL;
        if (c == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!isxdigit((unsigned char)p[i]))
                        return NULL;
                p += 4;
            } else if (!strchr("\"\\/bfnrt", *p) || !*p) {
                return NULL;
            }
        }
        p++;
    }
    return p + 1;
}

static const char *json_number(const char *p)
{
    const char *start = p;
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (isdigit((unsigned char)*p))
        while (isdigit((unsigned char)*p))
            p++;
    else
        return NULL;
    if (*p == '.') {
        if (!isdigit((unsigned char)*++p))
            return NULL;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!isdigit((unsigned char)*p))
            return NULL;
        while (isdigit((unsigned char)*p))
            p++;
    }
    return p > start ? p : NULL;
}

static const char *json_list(const char *p, char close, int depth, int object)
{
    p = json_ws(p + 1);
    if (*p == close)
        return p + 1;
    for (;;) {
        if (object) {
            if (!(p = json_string(p)))
                return NULL;
            p = json_ws(p);
            if (*p++ != ':')
                return NULL;
        }
        if (!(p = json_value(p, depth + 1)))
            return NULL;
        p = json_ws(p);
        if (*p == close)
            return p + 1;
        if (*p++ != ',')
            return NULL;
        p = json_ws(p);
    }
}

static const char *json_value(const char *p, int depth)
{
    if (depth > 32)
        return NULL;
    p = json_ws(p);
    switch (*p) {
    case '{': return json_list(p, '}', depth, 1);
    case '[': return json_list(p, ']', depth, 0);
    case '"': return json_string(p);
    case 't': return strncmp(p, "true", 4) ? NULL : p + 4;
    case 'f': return strncmp(p, "false", 5) ? NULL : p + 5;
    case 'n': return strncmp(p, "null", 4) ? NULL : p + 4;
    default: return json_number(p);
    }
}

/* 1 if `s` is exactly one JSON object (surrounding white space allowed). */
int ph_test_json_object(const char *s)
{
    s = json_ws(s);
    if (*s != '{')
        return 0;
    const char *end = json_value(s, 0);
    return end && *json_ws(end) == '\0';
}

/* The unsigned number after "key": in s; 0 with *found = 0 if absent. */
unsigned long long ph_test_json_u64(const char *s, const char *key, int *found)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char *p = strstr(s, pat);
    *found = p != NULL;
    return p ? strtoull(json_ws(p + strlen(pat)), NULL, 10) : 0;
}

long long ph_test_json_num(const char *s, const char *key)
{
    int found;
    unsigned long long v = ph_test_json_u64(s, key, &found);
    return found ? (long long)v : -1;
}

int ph_test_json_error(const char *out, const char *name, int code)
{
    char want[64];
    snprintf(want, sizeof(want), "\"error\": \"%s\"", name);
    const char *c = strstr(out, "\"code\":");
    return ph_test_json_object(out) && strstr(out, want) && c && atoi(c + 7) == code &&
           strstr(out, "\"message\": \"") && !strstr(out, "\"message\": \"\"");
}

const char *ph_test_text_field(const char *out, const char *label)
{
    size_t n = strlen(label);
    for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, label, n) == 0) {
            p += n;
            while (*p == ' ')
                p++;
            return p;
        }
    }
    return NULL;
}

long long ph_test_text_num(const char *out, const char *label)
{
    const char *p = ph_test_text_field(out, label);
    return p ? strtoll(p, NULL, 10) : -1;
}
