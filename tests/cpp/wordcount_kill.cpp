/*
 * wordcount_kill.cpp -- SIGKILL rounds on examples/cpp_wordcount.cpp: the
 * counter reads a deterministic text a line per transaction and reports
 * each commit; it is killed with SIGKILL at a random moment, then its
 * table is dumped (in a new process, so at a new address) and compared
 * with the counts of the text's first N lines, where N is the number of
 * lines the table says it counted: N must be the last commit reported, or
 * one more (committed, killed before the report).  The next round goes on
 * from line N.  Last, --check sums the counts and runs pheap_check.
 *
 * Usage: cpp_wordcount_kill [ROUNDS] [SEED]
 */
#include "check.hpp"

#include <csignal>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PHEAP_EXAMPLES_DIR
#error "PHEAP_EXAMPLES_DIR: the build's examples folder"
#endif

namespace {

const std::string counter_exe = PHEAP_EXAMPLES_DIR "/cpp_wordcount";

std::vector<std::string> text(unsigned lines, std::mt19937_64 &rng)
{
    std::vector<std::string> out;
    for (unsigned i = 0; i < lines; i++) {
        unsigned vocab = std::min(800u, 10 + i / 2), n = 1 + unsigned(rng() % 9);
        std::string line;
        for (unsigned k = 0; k < n; k++)
            line += (k ? " " : "") + ("w" + std::to_string(rng() % vocab));
        out.push_back(line);
    }
    return out;
}

/* Runs the counter on `input` (a file) and returns the pid and its stdout. */
pid_t start(const std::string &heap, const std::string &input, int *out_fd)
{
    int fds[2];
    if (pipe(fds))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        int in = open(input.c_str(), O_RDONLY);
        dup2(in, 0);
        dup2(fds[1], 1);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 2);
        close(fds[0]);
        execl(counter_exe.c_str(), counter_exe.c_str(), heap.c_str(), (char *)nullptr);
        _exit(127);
    }
    close(fds[1]);
    *out_fd = fds[0];
    return pid;
}

/* Output of a run of the counter with `arg`; exit status in *status. */
std::string run(const std::string &heap, const char *arg, int *status)
{
    std::string cmd = counter_exe + " '" + heap + "' " + arg + " 2>/dev/null";
    FILE *f = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while (f && (n = fread(buf, 1, sizeof buf, f)) > 0)
        out.append(buf, n);
    *status = f ? pclose(f) : -1;
    return out;
}

} // namespace

int main(int argc, char **argv)
{
    unsigned rounds = argc > 1 ? unsigned(std::atoi(argv[1])) : 30;
    std::uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : std::random_device{}();
    std::printf("cpp_wordcount_kill: %u rounds, seed %llu\n", rounds, (unsigned long long)seed);
    std::mt19937_64 rng(seed);
    std::vector<std::string> lines = text(4000, rng);
    std::string heap = check::path("words.heap"), input = check::path("input.txt");
    std::uint64_t done = 0; /* lines the table holds */
    int failures = 0;
    for (unsigned r = 0; r < rounds && done < lines.size(); r++) {
        {
            std::ofstream f(input);
            for (std::size_t i = done; i < lines.size(); i++)
                f << lines[i] << '\n';
        }
        int fd = -1;
        pid_t pid = start(heap, input, &fd);
        if (pid < 0) {
            std::printf("cannot start %s\n", counter_exe.c_str());
            return 1;
        }
        /* Read some reports, then kill at a random moment. */
        unsigned want = 1 + unsigned(rng() % 80);
        std::uint64_t reported = done;
        FILE *out = fdopen(fd, "r");
        char buf[128];
        for (unsigned k = 0; k < want && std::fgets(buf, sizeof buf, out); k++)
            std::sscanf(buf, "committed %llu", reinterpret_cast<unsigned long long *>(&reported));
        usleep(useconds_t(rng() % 3000));
        kill(pid, SIGKILL);
        while (std::fgets(buf, sizeof buf, out)) /* reports written before the kill */
            std::sscanf(buf, "committed %llu", reinterpret_cast<unsigned long long *>(&reported));
        std::fclose(out);
        int st = 0;
        waitpid(pid, &st, 0);

        int status = 0;
        std::string d = run(heap, "--dump", &status);
        std::istringstream in(d);
        std::string word;
        unsigned long long nlines = 0, nwords = 0, count = 0;
        in >> word >> nlines >> word >> nwords;
        std::map<std::string, std::uint64_t> got, want_counts;
        while (in >> word >> count)
            got[word] = count;
        std::uint64_t words_expected = 0;
        for (std::size_t i = 0; i < nlines && i < lines.size(); i++) {
            std::istringstream l(lines[i]);
            for (std::string w; l >> w; words_expected++)
                want_counts[w]++;
        }
        bool ok = status == 0 && (nlines == reported || nlines == reported + 1) &&
                  got == want_counts && nwords == words_expected;
        std::printf("round %2u: killed after %llu reported commits (%s); table holds %llu lines, %zu "
                    "distinct words: %s\n",
                    r, (unsigned long long)reported, WIFSIGNALED(st) ? "SIGKILL" : "had finished",
                    nlines, got.size(), ok ? "ok" : "WRONG");
        failures += !ok;
        done = nlines;
    }
    int status = 0;
    std::string c = run(heap, "--check", &status);
    std::printf("%s", c.c_str());
    if (status != 0)
        failures++;
    std::printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
