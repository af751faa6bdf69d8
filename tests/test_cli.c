// Tests of flag parsing (common/cli.c): defaults, both spellings, every error message, sizes
// with suffixes, choices, flags, required options, and --help.
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"
#include "common/cli.h"
#include "tests/child.h"
#include "tests/harness.h"

// The options of a typical benchmark, reset for every parse.
typedef struct {
    int steps;
    const char* model;
    int64_t bytes;
    double lr;
    int verbose;
    const char* out;
} opts_t;

static cli_opt_t g_opts[6];

static void make_opts(opts_t* o) {
    memset(o, 0x5A, sizeof *o);  // poison: every field must be written by the defaults
    cli_opt_t opts[6] = {
        {"steps", CLI_INT, &o->steps, "10", "measured steps", NULL},
        {"model", CLI_CHOICE, &o->model, "small", "model size", "tiny|small|medium"},
        {"bytes", CLI_SIZE, &o->bytes, "1M", "message size", NULL},
        {"lr", CLI_DOUBLE, &o->lr, "1e-3", "learning rate", NULL},
        {"verbose", CLI_FLAG, &o->verbose, "0", "print more", NULL},
        {"out", CLI_STR, &o->out, "results/x.csv", "output file", NULL},
    };
    memcpy(g_opts, opts, sizeof opts);
}

// Parse a NULL-terminated argument list (argv[0] is added). Returns cli_parse_err's result.
static int parse(opts_t* o, char* err, size_t errlen, const char* const* args) {
    char* argv[32] = {"prog"};
    int argc = 1;
    while (args && args[argc - 1]) argv[argc] = (char*)args[argc - 1], argc++;
    make_opts(o);
    err[0] = '\0';
    return cli_parse_err(argc, argv, g_opts, CLI_COUNT(g_opts), err, errlen);
}

#define ARGS(...) ((const char* const[]){__VA_ARGS__, NULL})

static void expect_error(const char* const* args, const char* want) {
    opts_t o;
    char err[512];
    cr_assert_eq(parse(&o, err, sizeof err, args), -1, "accepted; expected '%s'", want);
    cr_assert_str_eq(err, want);
}

Test(cli, defaults) {
    opts_t o;
    char err[256];
    cr_assert_eq(parse(&o, err, sizeof err, NULL), 0, "%s", err);
    cr_assert_eq(o.steps, 10);
    cr_assert_str_eq(o.model, "small");
    cr_assert_eq(o.bytes, 1048576);
    cr_assert_float_eq(o.lr, 1e-3, 1e-15);  // parsed from the same decimal text: exact up to rounding
    cr_assert_eq(o.verbose, 0);
    cr_assert_str_eq(o.out, "results/x.csv");
}

Test(cli, both_spellings_and_last_wins) {
    opts_t o;
    char err[256];
    cr_assert_eq(parse(&o, err, sizeof err, ARGS("--steps", "3", "--model=tiny", "--bytes=10K", "--lr", "-0.5",
                                                  "--verbose", "--out", "a b.csv", "--steps=7")),
                 0, "%s", err);
    cr_assert_eq(o.steps, 7);
    cr_assert_str_eq(o.model, "tiny");
    cr_assert_eq(o.bytes, 10240);
    cr_assert_float_eq(o.lr, -0.5, 0);  // exactly representable
    cr_assert_eq(o.verbose, 1);
    cr_assert_str_eq(o.out, "a b.csv");

    cr_assert_eq(parse(&o, err, sizeof err, ARGS("--steps=-4", "--verbose=0", "--out=")), 0, "%s", err);
    cr_assert_eq(o.steps, -4);
    cr_assert_eq(o.verbose, 0);
    cr_assert_str_eq(o.out, "", "--out= gives the empty string");
}

Test(cli, error_messages) {
    expect_error(ARGS("--steps", "abc"), "--steps: 'abc' is not an integer");
    expect_error(ARGS("--steps=1.5"), "--steps: '1.5' is not an integer");
    expect_error(ARGS("--steps="), "--steps: '' is not an integer");
    expect_error(ARGS("--steps", "99999999999"), "--steps: '99999999999' is out of range (-2147483648..2147483647)");
    expect_error(ARGS("--model", "huge"), "--model: 'huge' is not one of tiny|small|medium");
    expect_error(ARGS("--model=smal"), "--model: 'smal' is not one of tiny|small|medium");
    expect_error(ARGS("--stpes", "3"), "unknown flag --stpes (see --help)");
    expect_error(ARGS("--stpes=3"), "unknown flag --stpes (see --help)");
    expect_error(ARGS("--steps"), "--steps needs a value");
    expect_error(ARGS("--steps", "--model", "tiny"), "--steps needs a value");
    expect_error(ARGS("--lr", "fast"), "--lr: 'fast' is not a number");
    expect_error(ARGS("--lr", "nan"), "--lr: 'nan' is not a number");
    expect_error(ARGS("--bytes", "1X"),
                 "--bytes: '1X' is not a size (a non-negative integer with an optional K, M or G suffix, e.g. 64M)");
    expect_error(ARGS("--verbose=yes"), "--verbose is a flag and takes no value (or =0 / =1), got 'yes'");
    expect_error(ARGS("steps"), "unexpected argument 'steps' (flags are --name value; see --help)");
    expect_error(ARGS("-s", "3"), "unexpected argument '-s' (flags are --name value; see --help)");
}

Test(cli, help_returns_1) {
    opts_t o;
    char err[256];
    cr_assert_eq(parse(&o, err, sizeof err, ARGS("--help")), 1);
    cr_assert_eq(parse(&o, err, sizeof err, ARGS("--steps", "3", "-h")), 1);
    // --help wins over a later mistake: the user asked how to use the program.
    cr_assert_eq(parse(&o, err, sizeof err, ARGS("--help", "--bogus")), 1);
}

Test(cli, required_string) {
    const char* in = "unset";
    int n = 0;
    cli_opt_t opts[] = {
        {"in", CLI_STR, &in, NULL, "input file", NULL},
        {"n", CLI_INT, &n, "2", "count", NULL},
    };
    char* argv1[] = {"prog", "--n", "3"};
    char err[256];
    cr_assert_eq(cli_parse_err(3, argv1, opts, 2, err, sizeof err), -1);
    cr_assert_str_eq(err, "--in is required (see --help)");
    char* argv2[] = {"prog", "--in", "x.npy"};
    cr_assert_eq(cli_parse_err(3, argv2, opts, 2, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(in, "x.npy");
    cr_assert_eq(n, 2);
}

Test(cli, parse_size_suffixes_and_errors) {
    int64_t v = -1;
    cr_assert_eq(parse_size("4096", &v), 0);
    cr_assert_eq(v, 4096);
    cr_assert_eq(parse_size("1K", &v), 0);
    cr_assert_eq(v, 1024);
    cr_assert_eq(parse_size("10M", &v), 0);
    cr_assert_eq(v, 10485760);
    cr_assert_eq(parse_size("1G", &v), 0);
    cr_assert_eq(v, 1073741824);
    cr_assert_eq(parse_size("3g", &v), 0);
    cr_assert_eq(v, INT64_C(3) << 30);
    cr_assert_eq(parse_size("0", &v), 0);
    cr_assert_eq(v, 0);
    cr_assert_eq(parse_size("9223372036854775807", &v), 0);
    cr_assert_eq(v, INT64_MAX);
    v = 77;
    const char* bad[] = {"", "1X", "K", "-1", "+1", " 1", "1 ", "1KK", "1.5M", "0x10",
                         "9223372036854775808", "8589934592G", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_assert_eq(parse_size(bad[i], &v), -1, "'%s' should not parse", bad[i]);
        cr_assert_eq(v, 77, "a failed parse must leave the output alone");
    }
    cr_assert_eq(parse_size(NULL, &v), -1);
}

Test(cli, parse_size_list) {
    int64_t out[4];
    cr_assert_eq(parse_size_list("128,256,1K", out, 4), 3);
    cr_assert_eq(out[0], 128);
    cr_assert_eq(out[1], 256);
    cr_assert_eq(out[2], 1024);
    cr_assert_eq(parse_size_list("1M", out, 4), 1);
    cr_assert_eq(out[0], 1048576);
    cr_assert_eq(parse_size_list("1,2,3,4,5", out, 4), -1, "more than max");
    cr_assert_eq(parse_size_list("1,,2", out, 4), -1);
    cr_assert_eq(parse_size_list("1,2,", out, 4), -1);
    cr_assert_eq(parse_size_list("", out, 4), -1);
    cr_assert_eq(parse_size_list("1,x", out, 4), -1);
}

Test(cli, choice_ok) {
    cr_assert_eq(choice_ok("tiny|small|medium", "tiny"), 1);
    cr_assert_eq(choice_ok("tiny|small|medium", "medium"), 1);
    cr_assert_eq(choice_ok("tiny|small|medium", "small"), 1);
    cr_assert_eq(choice_ok("tiny|small|medium", "smal"), 0);
    cr_assert_eq(choice_ok("tiny|small|medium", "smalll"), 0);
    cr_assert_eq(choice_ok("tiny|small|medium", ""), 0);
    cr_assert_eq(choice_ok("tiny|small|medium", "tiny|small"), 0);
    cr_assert_eq(choice_ok("a", "a"), 1);
    cr_assert_eq(choice_ok(NULL, "a"), 0);
}

Test(cli, help_text_lists_every_flag) {
    opts_t o;
    make_opts(&o);
    char buf[4096] = "";
    FILE* f = fmemopen(buf, sizeof buf, "w");
    cli_print_help(f, "/x/y/bench", "Times the model.", g_opts, CLI_COUNT(g_opts));
    fclose(f);
    const char* want[] = {
        "usage: bench [flags]\nTimes the model.\n",
        "  --steps INT                measured steps (default 10)\n",
        "  --model tiny|small|medium  model size (default small)\n",
        "  --bytes SIZE               message size (default 1M) [K, M, G suffixes: 1K = 1024]\n",
        "  --lr NUM                   learning rate (default 1e-3)\n",
        "  --verbose                  print more (flag)\n",
        "  --out STR                  output file (default results/x.csv)\n",
        "  --help                     print this help and exit\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_assert(strstr(buf, want[i]), "help is missing '%s'; it was:\n%s", want[i], buf);
}

static void child_parse(void* p) {
    char** argv = p;
    int argc = 0;
    while (argv[argc]) argc++;
    opts_t o;
    make_opts(&o);
    cli_parse(argc, argv, "A test program.", g_opts, CLI_COUNT(g_opts));
    printf("parsed steps=%d\n", o.steps);
}

Test(cli, cli_parse_exits_0_on_help_and_2_on_error) {
    char out[4096];
    char* help[] = {"/some/dir/myprog", "--help", NULL};
    cr_assert_eq(run_child(child_parse, help, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "usage: myprog [flags]\nA test program.\n"), "got: %s", out);
    cr_assert(strstr(out, "--steps INT"), "got: %s", out);

    char* bad[] = {"/some/dir/myprog", "--model", "huge", NULL};
    cr_assert_eq(run_child(child_parse, bad, out, sizeof out), 2, "%s", out);
    cr_assert_str_eq(out, "myprog: error: --model: 'huge' is not one of tiny|small|medium\n");

    char* good[] = {"myprog", "--steps", "5", NULL};
    cr_assert_eq(run_child(child_parse, good, out, sizeof out), 0, "%s", out);
    cr_assert_str_eq(out, "parsed steps=5\n");
}

// Comma lists of choices (the --dtype bf16,f32 of the stage 03/04 benchmarks): every item checked.
Test(cli, choice_list_check_names_the_bad_item) {
    char err[256];
    cr_assert_eq(choice_list_check("dtype", "bf16,f32", "bf16|f32", err, sizeof err), 0, "%s", err);
    cr_assert_eq(choice_list_check("dtype", "f32", "bf16|f32", err, sizeof err), 0, "%s", err);
    cr_assert_eq(choice_list_check("dtype", "bf16,f16", "bf16|f32", err, sizeof err), -1);
    cr_assert_str_eq(err, "--dtype: 'f16' is not one of bf16|f32 (a comma list, e.g. bf16,f32)");
    cr_assert_eq(choice_list_check("dtype", "bf16,", "bf16|f32", err, sizeof err), -1, "an empty item");
    cr_assert_str_eq(err, "--dtype: '' is not one of bf16|f32 (a comma list, e.g. bf16,f32)");
    cr_assert_eq(choice_list_check("dtype", "", "bf16|f32", err, sizeof err), -1);
    cr_assert_str_eq(err, "--dtype: empty (a comma list of bf16|f32, e.g. bf16,f32)");
}

// An empty item of a comma list is refused (strtok would skip it), and so is an empty list.
Test(cli, list_check_items_refuses_empty_items) {
    char err[256];
    cr_assert_eq(list_check_items("variant", "naive,flat", err, sizeof err), 0, "%s", err);
    cr_assert_eq(list_check_items("variant", "naive", err, sizeof err), 0, "%s", err);
    const char* bad[] = {"naive,,flat", ",naive", "naive,", ","};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_assert_eq(list_check_items("variant", bad[i], err, sizeof err), -1, "%s accepted", bad[i]);
        char want[128];
        snprintf(want, sizeof want, "--variant: '%s' has an empty item (a comma list, e.g. a,b)", bad[i]);
        cr_assert_str_eq(err, want);
    }
    cr_assert_eq(list_check_items("in", "", err, sizeof err), -1);
    cr_assert_str_eq(err, "--in: empty (a comma list, e.g. a,b)");
}

// fail() writes its line in ONE write(2), so that ranks failing at once never interleave inside
// a line. Seen through a packet-mode pipe (O_DIRECT): each write is its own packet and one read
// returns one packet, so a line written in pieces would come back as its first piece only.
Test(cli, fail_writes_its_line_in_one_write) {
    int fd[2];
    cr_assert_eq(pipe2(fd, O_DIRECT), 0, "pipe2(O_DIRECT): %s", strerror(errno));
    const pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], STDERR_FILENO);
        set_progname("/x/myprog");
        fail("--flag: '%s' is not %d of %s", "value", 1, "a|b|c");
    }
    close(fd[1]);
    int st = 0;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status %d", st);
    char buf[4096];
    const ssize_t n = read(fd[0], buf, sizeof buf - 1);
    close(fd[0]);
    cr_assert(n > 0);
    buf[n] = '\0';
    cr_assert_str_eq(buf, "myprog: error: --flag: 'value' is not 1 of a|b|c\n");
}
