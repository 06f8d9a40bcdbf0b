/*
 * namespace.c -- the heap directory (pheap_dir: PHEAP_DIR, XDG_DATA_HOME,
 * HOME, the password database) and heap names: pheap_open("name") is
 * name.heap in that directory, created with it; bad names are refused;
 * anything with a '/' is a path as before.  The time of the last
 * read-write open (pheap_stats.last_open).
 */
#include <limits.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define SIZE (1u << 20)

static const char *const vars[] = {"PHEAP_DIR", "XDG_DATA_HOME", "HOME"};
static char *saved[3];
static int had[3];

/* Saves the three variables and unsets them; restore() puts them back. */
static void clear_env(void)
{
    for (unsigned i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        had[i] = v != NULL;
        free(saved[i]);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(vars[i]);
    }
}

static void restore_env(void)
{
    for (unsigned i = 0; i < 3; i++) {
        if (had[i])
            setenv(vars[i], saved[i], 1);
        else
            unsetenv(vars[i]);
    }
}

static const char *dir_of(void)
{
    static char buf[PATH_MAX];
    int rc = pheap_dir(buf, sizeof(buf));
    return rc ? NULL : buf;
}

/* A subdirectory of the test directory, not yet made. */
static const char *fresh_dir(const char *name)
{
    static char buf[4][PATH_MAX];
    static unsigned next;
    char *p = buf[next++ % 4];
    snprintf(p, PATH_MAX, "%s/%s", ph_test_dir(), name);
    return p;
}

TEST(dir_from_each_variable)
{
    clear_env();
    setenv("HOME", "/home/someone", 1);
    const char *d = dir_of();
    CHECK(d && !strcmp(d, "/home/someone/.local/share/pheap"));
    setenv("XDG_DATA_HOME", "/xdg/data", 1);
    d = dir_of();
    CHECK(d && !strcmp(d, "/xdg/data/pheap"));
    setenv("PHEAP_DIR", "/srv/heaps/", 1); /* the trailing '/' goes */
    d = dir_of();
    CHECK(d && !strcmp(d, "/srv/heaps"));
    setenv("PHEAP_DIR", "", 1); /* empty: unset */
    d = dir_of();
    CHECK(d && !strcmp(d, "/xdg/data/pheap"));
    setenv("XDG_DATA_HOME", "", 1);
    d = dir_of();
    CHECK(d && !strcmp(d, "/home/someone/.local/share/pheap"));
    setenv("XDG_DATA_HOME", "relative/data", 1); /* not absolute: ignored, as XDG says */
    d = dir_of();
    CHECK(d && !strcmp(d, "/home/someone/.local/share/pheap"));
    setenv("PHEAP_DIR", "heaps", 1); /* a relative PHEAP_DIR is taken as it is */
    d = dir_of();
    CHECK(d && !strcmp(d, "heaps"));
    restore_env();
}

TEST(dir_without_home_uses_the_password_database)
{
    clear_env();
    struct passwd *pw = getpwuid(getuid());
    char buf[PATH_MAX];
    int rc = pheap_dir(buf, sizeof(buf));
    if (pw && pw->pw_dir && *pw->pw_dir) {
        char want[PATH_MAX];
        snprintf(want, sizeof(want), "%s/.local/share/pheap", strcmp(pw->pw_dir, "/") ? pw->pw_dir : "");
        CHECK_EQ(rc, 0);
        CHECK(!strcmp(buf, want));
    } else {
        CHECK_EQ(rc, PHEAP_ENOENT);
        CHECK(strstr(pheap_errmsg(), "PHEAP_DIR") != NULL);
    }
    setenv("HOME", "", 1); /* empty: as unset */
    char again[PATH_MAX];
    CHECK_EQ(pheap_dir(again, sizeof(again)), rc);
    if (!rc)
        CHECK(!strcmp(buf, again));
    restore_env();
}

TEST(dir_buffer_errors)
{
    clear_env();
    setenv("PHEAP_DIR", "/a/rather/long/directory", 1);
    char small[8];
    CHECK_EQ(pheap_dir(small, sizeof(small)), PHEAP_ENAME);
    CHECK_EQ(pheap_dir(NULL, 100), PHEAP_EINVAL);
    CHECK_EQ(pheap_dir(small, 0), PHEAP_EINVAL);
    char buf[64];
    CHECK_EQ(pheap_path("x", buf, 24), PHEAP_ENAME); /* /a/rather/long/directory/x.heap */
    REQUIRE_OK(pheap_path("x", buf, sizeof(buf)));
    CHECK(!strcmp(buf, "/a/rather/long/directory/x.heap"));
    REQUIRE_OK(pheap_path("x.heap", buf, sizeof(buf))); /* the suffix is not doubled */
    CHECK(!strcmp(buf, "/a/rather/long/directory/x.heap"));
    REQUIRE_OK(pheap_path("./x", buf, sizeof(buf))); /* a path is itself */
    CHECK(!strcmp(buf, "./x"));
    restore_env();
}

TEST(name_creates_directory_and_file)
{
    clear_env();
    const char *dir = fresh_dir("ns-create/deeper/heaps");
    setenv("PHEAP_DIR", dir, 1);
    pheap *h = NULL;
    CHECK_EQ(pheap_open("mydata", NULL, &h), PHEAP_ENOENT); /* no PHEAP_CREATE: nothing made */
    CHECK_EQ(access(dir, F_OK), -1);
    pheap_options o = {.size = SIZE, .flags = PHEAP_CREATE};
    REQUIRE_OK(pheap_open("mydata", &o, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    time_t now = time(NULL);
    CHECK(st.last_open + 5 >= (uint64_t)now && st.last_open <= (uint64_t)now + 5);
    REQUIRE_OK(pheap_close(h));
    struct stat sb;
    REQUIRE(stat(dir, &sb) == 0);
    CHECK(S_ISDIR(sb.st_mode));
    CHECK_EQ(sb.st_mode & 0777 & ~0700, 0); /* 0700, less the umask */
    char file[PATH_MAX];
    snprintf(file, sizeof(file), "%s/mydata.heap", dir);
    CHECK_EQ(stat(file, &sb), 0);
    /* The same heap by its name, its name with the suffix, and its path. */
    REQUIRE_OK(pheap_open("mydata.heap", NULL, &h));
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.open_count, 2);
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(file, NULL, &h));
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.open_count, 3);
    REQUIRE_OK(pheap_close(h));
    /* Errors name the file, not only the name. */
    CHECK_EQ(pheap_open("other", NULL, &h), PHEAP_ENOENT);
    CHECK(strstr(pheap_errmsg(), "other.heap") != NULL);
    restore_env();
}

TEST(bad_names)
{
    clear_env();
    setenv("PHEAP_DIR", fresh_dir("ns-bad"), 1);
    pheap_options o = {.size = SIZE, .flags = PHEAP_CREATE};
    pheap *h = NULL;
    CHECK_EQ(pheap_open("", &o, &h), PHEAP_EINVAL);
    CHECK_EQ(pheap_open(".", &o, &h), PHEAP_ENAME);
    CHECK_EQ(pheap_open("..", &o, &h), PHEAP_ENAME);
    CHECK(strstr(pheap_errmsg(), "./..") != NULL); /* says how to mean a path */
    char name[300];
    memset(name, 'n', 256);
    name[256] = 0;
    CHECK_EQ(pheap_open(name, &o, &h), PHEAP_ENAME);
    name[251] = 0; /* 251 + ".heap": 256 bytes */
    CHECK_EQ(pheap_open(name, &o, &h), PHEAP_ENAME);
    name[250] = 0; /* 255: the longest */
    REQUIRE_OK(pheap_open(name, &o, &h));
    REQUIRE_OK(pheap_close(h));
    memset(name, 'n', 250);
    memcpy(name + 250, ".heap", 6); /* 255 bytes with its own suffix */
    REQUIRE_OK(pheap_open(name, NULL, &h));
    REQUIRE_OK(pheap_close(h));
    restore_env();
}

TEST(slash_means_path)
{
    clear_env();
    setenv("PHEAP_DIR", fresh_dir("ns-unused"), 1);
    char rel[PATH_MAX];
    char cwd[PATH_MAX];
    REQUIRE(getcwd(cwd, sizeof(cwd)));
    REQUIRE(chdir(ph_test_dir()) == 0);
    snprintf(rel, sizeof(rel), "./here");
    pheap_options o = {.size = SIZE, .flags = PHEAP_CREATE};
    pheap *h = NULL;
    int rc = pheap_open(rel, &o, &h);
    CHECK_EQ(rc, 0);
    pheap_close(h);
    CHECK_EQ(access("here", F_OK), 0); /* no suffix, in the current directory */
    CHECK_EQ(access(fresh_dir("ns-unused"), F_OK), -1);
    CHECK(chdir(cwd) == 0);
    restore_env();
}

TEST(dir_that_is_a_file)
{
    clear_env();
    const char *file = ph_test_path("ns-a-file");
    FILE *f = fopen(file, "w");
    REQUIRE(f);
    fputs("not a directory\n", f);
    fclose(f);
    setenv("PHEAP_DIR", file, 1);
    pheap_options o = {.size = SIZE, .flags = PHEAP_CREATE};
    pheap *h = NULL;
    CHECK_EQ(pheap_open("x", &o, &h), PHEAP_EINVAL);
    CHECK(strstr(pheap_errmsg(), "PHEAP_DIR") && strstr(pheap_errmsg(), "not a directory"));
    CHECK_EQ(pheap_open("x", NULL, &h), PHEAP_EINVAL);
    char sub[PATH_MAX];
    snprintf(sub, sizeof(sub), "%s/below", file); /* a parent is a file */
    setenv("PHEAP_DIR", sub, 1);
    CHECK_EQ(pheap_open("x", &o, &h), PHEAP_EINVAL);
    CHECK(h == NULL);
    restore_env();
}

TEST(last_open_is_recorded_by_read_write_opens_only)
{
    const char *path = ph_test_path("last-open.heap");
    pheap *h = ph_test_create(path, SIZE);
    REQUIRE(h);
    pheap_close(h);
    /* An older heap: the word was reserved, zero. */
    FILE *f = fopen(path, "r+b");
    REQUIRE(f);
    uint64_t zero = 0;
    REQUIRE(fseek(f, 2048 + 32, SEEK_SET) == 0);
    REQUIRE(fwrite(&zero, 8, 1, f) == 1);
    fclose(f);
    pheap_options ro = {.flags = PHEAP_RDONLY};
    REQUIRE_OK(pheap_open(path, &ro, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.last_open, 0); /* unknown */
    pheap_close(h);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK(st.last_open >= (uint64_t)time(NULL) - 5);
    pheap_close(h);
}
