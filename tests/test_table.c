// Tests of the result tables (common/table.c): the exact Markdown text, CSV quoting, JSON that
// a real parser accepts (numbers bare, strings quoted), and the files' directories created.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/table.h"
#include "tests/child.h"
#include "tests/harness.h"

static table_t* sample(void) {
    table_t* t = table_new("flash forward", 4, (const char*[]){"N", "ms", "impl", "note"});
    table_row(t);
    table_cell(t, "%d", 128);
    table_cell(t, "%.3f", 0.0625);
    table_cell(t, "cuda");
    table_cell(t, "a, b");
    table_row(t);
    table_cell(t, "%d", 16384);
    table_cell(t, "%.2e", 1234.5);
    table_cell(t, "ref|cpu");
    table_cell(t, "say \"hi\"");
    table_row(t);
    table_cell(t, "%d", -7);
    table_cell(t, "OOM");
    // two cells left empty on purpose
    return t;
}

static char* slurp(const char* path) {
    FILE* f = fopen(path, "rb");
    cr_assert_not_null(f, "%s was not written", path);
    char* buf = calloc(1, 65536);
    size_t n = fread(buf, 1, 65535, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

Test(table, accessors) {
    table_t* t = sample();
    cr_assert_eq(table_nrows(t), 3);
    cr_assert_str_eq(table_get(t, 0, 0), "128");
    cr_assert_str_eq(table_get(t, 1, 1), "1.23e+03");
    cr_assert_str_eq(table_get(t, 2, 3), "", "an unfilled cell reads as empty");
    cr_assert_null(table_get(t, 3, 0));
    cr_assert_null(table_get(t, 0, 4));
    cr_assert_null(table_get(t, -1, 0));
    table_free(t);
}

Test(table, markdown_text) {
    table_t* t = sample();
    char buf[4096] = "";
    FILE* f = fmemopen(buf, sizeof buf, "w");
    table_print_md(t, f);
    fclose(f);
    // Numeric columns (every cell a number) are right-aligned; '|' inside a cell is escaped.
    const char* want =
        "### flash forward\n"
        "\n"
        "| N     | ms       | impl     | note     |\n"
        "| ----: | -------- | -------- | -------- |\n"
        "|   128 | 0.062    | cuda     | a, b     |\n"
        "| 16384 | 1.23e+03 | ref\\|cpu | say \"hi\" |\n"
        "|    -7 | OOM      |          |          |\n";
    cr_assert_str_eq(buf, want);
    table_free(t);
}

Test(table, csv_quoting) {
    table_t* t = sample();
    char path[512];
    snprintf(path, sizeof path, "%s/new/dir/x.csv", test_tmpdir());  // directories do not exist yet
    cr_assert_eq(table_write_csv(t, path), 0);
    char* got = slurp(path);
    const char* want =
        "N,ms,impl,note\n"
        "128,0.062,cuda,\"a, b\"\n"
        "16384,1.23e+03,ref|cpu,\"say \"\"hi\"\"\"\n"
        "-7,OOM,,\n";
    cr_assert_str_eq(got, want);
    free(got);
    table_free(t);
}

Test(table, json_numbers_and_strings) {
    table_t* t = sample();
    char path[512];
    snprintf(path, sizeof path, "%s/j/x.json", test_tmpdir());
    cr_assert_eq(table_write_json(t, path), 0);
    char* got = slurp(path);
    const char* want =
        "[\n"
        "  {\"N\": 128, \"ms\": 0.062, \"impl\": \"cuda\", \"note\": \"a, b\"},\n"
        "  {\"N\": 16384, \"ms\": 1.23e+03, \"impl\": \"ref|cpu\", \"note\": \"say \\\"hi\\\"\"},\n"
        "  {\"N\": -7, \"ms\": \"OOM\", \"impl\": null, \"note\": null}\n"
        "]\n";
    cr_assert_str_eq(got, want);
    free(got);

    // A real JSON parser agrees (python3 is on every machine this runs on; skip otherwise).
    char cmd[1024], out[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
             "print(type(d[0][\"N\"]).__name__, type(d[1][\"ms\"]).__name__, type(d[2][\"ms\"]).__name__, d[1][\"note\"])' '%s'",
             path);
    int st = run_capture(cmd, out, sizeof out);
    if (st == 127) cr_skip_test("python3 not found");
    cr_assert_eq(st, 0, "python could not parse the JSON: %s", out);
    cr_assert_str_eq(out, "int float str say \"hi\"\n");
    table_free(t);
}

Test(table, json_only_valid_numbers_are_bare) {
    const char* cells[] = {"0", "-0.5", "1e10", "2E-3", "007", "1.", ".5", "+1", "nan", "inf", "0x10", "1,5", "12 ms"};
    int ncells = (int)(sizeof cells / sizeof *cells);
    table_t* t = table_new("numbers", 1, (const char*[]){"v"});
    for (int i = 0; i < ncells; i++) {
        table_row(t);
        table_cell(t, "%s", cells[i]);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/numbers.json", test_tmpdir());
    cr_assert_eq(table_write_json(t, path), 0);
    char* got = slurp(path);
    const char* want =
        "[\n  {\"v\": 0},\n  {\"v\": -0.5},\n  {\"v\": 1e10},\n  {\"v\": 2E-3},\n  {\"v\": \"007\"},\n"
        "  {\"v\": \"1.\"},\n  {\"v\": \".5\"},\n  {\"v\": \"+1\"},\n  {\"v\": \"nan\"},\n  {\"v\": \"inf\"},\n"
        "  {\"v\": \"0x10\"},\n  {\"v\": \"1,5\"},\n  {\"v\": \"12 ms\"}\n]\n";
    cr_assert_str_eq(got, want);
    free(got);
    table_free(t);
}

Test(table, empty_table_and_control_characters) {
    table_t* t = table_new("empty", 2, (const char*[]){"a", "b"});
    char path[512];
    snprintf(path, sizeof path, "%s/empty.json", test_tmpdir());
    cr_assert_eq(table_write_json(t, path), 0);
    char* got = slurp(path);
    cr_assert_str_eq(got, "[]\n");
    free(got);
    snprintf(path, sizeof path, "%s/empty.csv", test_tmpdir());
    cr_assert_eq(table_write_csv(t, path), 0);
    got = slurp(path);
    cr_assert_str_eq(got, "a,b\n");
    free(got);

    table_row(t);
    table_cell(t, "line1\nline2");
    table_cell(t, "tab\there\x01");
    snprintf(path, sizeof path, "%s/ctrl.json", test_tmpdir());
    cr_assert_eq(table_write_json(t, path), 0);
    got = slurp(path);
    cr_assert_str_eq(got, "[\n  {\"a\": \"line1\\nline2\", \"b\": \"tab\\there\\u0001\"}\n]\n");
    free(got);
    snprintf(path, sizeof path, "%s/ctrl.csv", test_tmpdir());
    cr_assert_eq(table_write_csv(t, path), 0);
    got = slurp(path);
    cr_assert_str_eq(got, "a,b\n\"line1\nline2\",tab\there\x01\n");
    free(got);
    table_free(t);
}

static void child_write_blocked(void* p) {
    table_t* t = sample();
    int a = table_write_csv(t, (const char*)p), b = table_write_json(t, (const char*)p);
    table_free(t);
    exit(a == -1 && b == -1 ? 0 : 1);
}

Test(table, unwritable_path_returns_error_and_warns) {
    char path[512], out[2048], want[1024];
    // A regular file where a directory should be.
    snprintf(path, sizeof path, "%s/blocker", test_tmpdir());
    FILE* f = fopen(path, "w");
    fclose(f);
    snprintf(path, sizeof path, "%s/blocker/x.csv", test_tmpdir());
    cr_assert_eq(run_child(child_write_blocked, path, out, sizeof out), 0, "both writes must return -1: %s", out);
    snprintf(want, sizeof want, "%s: warning: cannot create the directory for %s: Not a directory\n", progname(),
             path);
    cr_assert(strstr(out, want) == out, "got: %s", out);
}
