/*
 * check.hpp -- the C++ tests' small framework, the same shape as the C
 * harness: TEST(name) registers a test, CHECK records a failure and goes
 * on, REQUIRE stops the test; main() runs every test (or those whose name
 * holds argv[1]) and ends with "N passed, N failed".  Heap files go to a
 * per-process directory under /dev/shm (or /tmp), removed at exit.
 */
#ifndef PHEAP_TEST_CHECK_HPP
#define PHEAP_TEST_CHECK_HPP

#include <pheap.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

namespace check {

struct test {
    const char *name;
    void (*fn)();
};
inline std::vector<test> &tests()
{
    static std::vector<test> v;
    return v;
}
inline int failed_now = 0;

inline void fail(const char *file, int line, const std::string &what)
{
    std::fprintf(stderr, "%s:%d: %s\n", file, line, what.c_str());
    failed_now++;
}

/* A fresh directory for this process's heap files; removed at exit. */
inline const std::string &dir()
{
    static std::string d;
    if (d.empty()) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        std::string t = std::string(base) + "/pheap-cpp.XXXXXX";
        std::vector<char> buf(t.begin(), t.end());
        buf.push_back('\0');
        if (!mkdtemp(buf.data())) {
            std::perror("mkdtemp");
            std::exit(1);
        }
        d = buf.data();
        static pid_t owner = getpid();
        std::atexit([] {
            if (getpid() == owner)
                std::system(("rm -rf '" + d + "'").c_str());
        });
    }
    return d;
}

inline std::string path(const std::string &name)
{
    std::string p = dir() + "/" + name;
    unlink(p.c_str());
    return p;
}

struct registrar {
    registrar(const char *name, void (*fn)()) { tests().push_back({name, fn}); }
};

inline int main(int argc, char **argv)
{
    int passed = 0, failed = 0;
    for (const test &t : tests()) {
        if (argc > 1 && !std::strstr(t.name, argv[1]))
            continue;
        failed_now = 0;
        try {
            t.fn();
        } catch (const std::exception &e) {
            fail(__FILE__, __LINE__, std::string("unexpected exception: ") + e.what());
        }
        std::printf("%s %s\n", failed_now ? "FAIL" : "ok  ", t.name);
        (failed_now ? failed : passed)++;
    }
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

} // namespace check

#define TEST(name)                                                   \
    static void test_##name();                                       \
    static check::registrar reg_##name(#name, test_##name);          \
    static void test_##name()

#define CHECK(c)                                                     \
    do {                                                             \
        if (!(c))                                                    \
            check::fail(__FILE__, __LINE__, "CHECK(" #c ")");        \
    } while (0)
#define REQUIRE(c)                                                   \
    do {                                                             \
        if (!(c)) {                                                  \
            check::fail(__FILE__, __LINE__, "REQUIRE(" #c ")");      \
            return;                                                  \
        }                                                            \
    } while (0)
#define CHECK_EQ(a, b)                                               \
    do {                                                             \
        auto va_ = (a);                                              \
        auto vb_ = (b);                                              \
        if (!(va_ == vb_))                                           \
            check::fail(__FILE__, __LINE__, "CHECK_EQ(" #a ", " #b ")"); \
    } while (0)
/* The statement throws pheap::error with this code. */
#define CHECK_THROWS_CODE(stmt, code)                                \
    do {                                                             \
        int got_ = 0;                                                \
        try {                                                        \
            stmt;                                                    \
        } catch (const pheap::error &e_) {                           \
            got_ = e_.pheap_code();                                  \
        }                                                            \
        if (got_ != (code))                                          \
            check::fail(__FILE__, __LINE__, "CHECK_THROWS_CODE(" #stmt ", " #code "): got " + std::to_string(got_)); \
    } while (0)

#define TEST_MAIN                                                    \
    int main(int argc, char **argv) { return check::main(argc, argv); }

#endif
