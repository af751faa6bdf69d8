// Tests of atomic output files (common/fileio.c): a committed file appears whole, an aborted or
// failed one leaves the old file untouched and no temporary, a process that exits before
// committing leaves nothing behind; and mkdir_p.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fileio.h"
#include "tests/child.h"
#include "tests/harness.h"

// A fresh directory per test under the test's temporary directory.
static const char* fresh_dir(const char* name) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", test_tmpdir(), name);
    cr_assert_eq(mkdir_p(dir), 0, "mkdir_p(%s): %s", dir, strerror(errno));
    return dir;
}

static void write_text(const char* path, const char* text) {
    FILE* f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static void expect_text(const char* path, const char* want) {
    char buf[4096] = "";
    FILE* f = fopen(path, "r");
    cr_assert_not_null(f, "%s does not exist", path);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    cr_assert_str_eq(buf, want, "contents of %s", path);
}

// Number of entries in `dir` other than . and .. (every test expects an exact count).
static int count_entries(const char* dir) {
    char cmd[600], out[64];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    cr_assert_eq(run_capture(cmd, out, sizeof out), 0);
    return atoi(out);
}

Test(fileio, commit_replaces_the_file) {
    const char* dir = fresh_dir("commit");
    char path[600];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    write_text(path, "old\n");
    FILE* f = afile_open(path);
    cr_assert_not_null(f, "%s", strerror(errno));
    fputs("new contents\n", f);
    expect_text(path, "old\n");  // not visible before the commit
    cr_assert_eq(count_entries(dir), 2, "the temporary sits beside the target");
    cr_assert_eq(afile_commit(f), 0, "%s", strerror(errno));
    expect_text(path, "new contents\n");
    cr_assert_eq(count_entries(dir), 1, "the temporary is gone after the commit");
}

Test(fileio, abort_keeps_the_old_file) {
    const char* dir = fresh_dir("abort");
    char path[600];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    write_text(path, "old\n");
    FILE* f = afile_open(path);
    cr_assert_not_null(f);
    fputs("half written", f);
    afile_abort(f);
    expect_text(path, "old\n");
    cr_assert_eq(count_entries(dir), 1);
}

Test(fileio, same_path_twice_is_refused) {
    const char* dir = fresh_dir("twice");
    char path[600];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    FILE* f = afile_open(path);
    cr_assert_not_null(f);
    errno = 0;
    cr_assert_null(afile_open(path), "two open temporaries for one path would overwrite each other");
    cr_assert_eq(errno, EBUSY);
    afile_abort(f);
    cr_assert_eq(count_entries(dir), 0);
    cr_assert_eq(afile_commit(NULL), -1);
    cr_assert_eq(afile_commit(stdout), -1, "a stream that afile_open did not return is refused");
}

static void child_exit_before_commit(void* p) {
    FILE* f = afile_open((const char*)p);
    if (!f) exit(10);
    fputs("never committed\n", f);
    exit(3);  // as die() and fail() do
}

Test(fileio, exit_before_commit_leaves_nothing) {
    const char* dir = fresh_dir("exit");
    char path[600], out[256];
    snprintf(path, sizeof path, "%s/new.txt", dir);
    cr_assert_eq(run_child(child_exit_before_commit, path, out, sizeof out), 3, "%s", out);
    cr_assert_eq(count_entries(dir), 0, "the exit handler must remove the temporary");

    snprintf(path, sizeof path, "%s/old.txt", dir);
    write_text(path, "old\n");
    cr_assert_eq(run_child(child_exit_before_commit, path, out, sizeof out), 3, "%s", out);
    expect_text(path, "old\n");
    cr_assert_eq(count_entries(dir), 1);
}

static void child_just_exits(void* p) {
    (void)p;
    exit(0);
}

Test(fileio, forked_child_exit_keeps_the_parents_temporary) {
    const char* dir = fresh_dir("forked");
    char path[600], out[64];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    FILE* f = afile_open(path);
    cr_assert_not_null(f);
    fputs("parent's data\n", f);
    // A child forked while the file is open inherits the list of temporaries; its exit must
    // leave the parent's alone.
    cr_assert_eq(run_child(child_just_exits, NULL, out, sizeof out), 0);
    cr_assert_eq(count_entries(dir), 1, "the child's exit removed the parent's temporary");
    cr_assert_eq(afile_commit(f), 0, "%s", strerror(errno));
    expect_text(path, "parent's data\n");
}

// Make the write itself fail: a file-size limit turns the flush at commit into EFBIG.
static void child_write_fails(void* p) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {100, 100};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) exit(10);
    FILE* f = afile_open((const char*)p);
    if (!f) exit(11);
    for (int i = 0; i < 1000; i++) fputs("0123456789", f);  // 10000 bytes > 100
    exit(afile_commit(f) == -1 && errno == EFBIG ? 0 : 12);
}

Test(fileio, failed_write_keeps_the_old_file) {
    const char* dir = fresh_dir("efbig");
    char path[600], out[256];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    write_text(path, "old\n");
    cr_assert_eq(run_child(child_write_fails, path, out, sizeof out), 0,
                 "afile_commit must report the failed write (child status above): %s", out);
    expect_text(path, "old\n");
    cr_assert_eq(count_entries(dir), 1, "a failed commit removes its temporary");
}

Test(fileio, open_fails_in_a_missing_directory) {
    char path[600];
    snprintf(path, sizeof path, "%s/no/such/dir/out.txt", test_tmpdir());
    errno = 0;
    cr_assert_null(afile_open(path));
    cr_assert_eq(errno, ENOENT);
}

Test(fileio, mkdir_p_nested_existing_and_blocked) {
    char dir[600], file[600];
    snprintf(dir, sizeof dir, "%s/a/b//c/", test_tmpdir());
    cr_assert_eq(mkdir_p(dir), 0, "%s", strerror(errno));
    struct stat st;
    cr_assert(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
    cr_assert_eq(mkdir_p(dir), 0, "an existing directory is fine");
    cr_assert_eq(mkdir_p(""), 0);

    snprintf(file, sizeof file, "%s/a/plain", test_tmpdir());
    write_text(file, "x");
    snprintf(dir, sizeof dir, "%s/a/plain/sub", test_tmpdir());
    errno = 0;
    cr_assert_eq(mkdir_p(dir), -1);
    cr_assert_eq(errno, ENOTDIR);
    cr_assert_eq(mkdir_p(file), -1, "a file where the directory should be");
    cr_assert_eq(errno, ENOTDIR);

    snprintf(file, sizeof file, "%s/p/q/r.csv", test_tmpdir());
    cr_assert_eq(mkdir_parent(file), 0);
    snprintf(dir, sizeof dir, "%s/p/q", test_tmpdir());
    cr_assert(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
    cr_assert_eq(mkdir_parent("plain.csv"), 0, "no directory part: nothing to do");
}

// ---- checks before a run, and output sets that appear whole or not at all

static int exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0;
}

Test(fileio, dir_check_writable_creates_nothing) {
    const char* dir = fresh_dir("wcheck");
    char path[600], err[512];
    cr_assert_eq(dir_check_writable(dir, err, sizeof err), 0, "%s", err);
    snprintf(path, sizeof path, "%s/not/yet/there", dir);
    cr_assert_eq(dir_check_writable(path, err, sizeof err), 0, "a missing directory under a writable one: %s", err);
    cr_assert_eq(count_entries(dir), 0, "the check left something behind");

    snprintf(path, sizeof path, "%s/plain", dir);
    write_text(path, "x");
    snprintf(path, sizeof path, "%s/plain/sub/dir", dir);
    cr_assert_eq(dir_check_writable(path, err, sizeof err), -1);
    cr_assert(strstr(err, "plain is not a directory"), "%s", err);
    // /proc refuses new entries even to root (a read-only place that permissions cannot fake).
    cr_assert_eq(dir_check_writable("/proc/cs336-no-such/dir", err, sizeof err), -1);
    cr_assert(strstr(err, "cannot create files in /proc: "), "%s", err);
    cr_assert_eq(dir_check_writable("", err, sizeof err), -1);
}

// An output file's place, checked before a run: the path and the system's reason when it cannot
// be written, nothing created or changed either way.
Test(fileio, file_check_writable_names_path_and_reason) {
    const char* dir = fresh_dir("fcheck");
    char path[600], err[1024];
    snprintf(path, sizeof path, "%s/new.csv", dir);
    cr_assert_eq(file_check_writable(path, 0, err, sizeof err), 0, "%s", err);
    snprintf(path, sizeof path, "%s/sub/new.csv", dir);
    cr_assert_eq(file_check_writable(path, 0, err, sizeof err), -1, "a missing directory without make_parents");
    cr_assert(strstr(err, "No such file or directory"), "%s", err);
    cr_assert_eq(file_check_writable(path, 1, err, sizeof err), 0, "with make_parents: %s", err);
    cr_assert_eq(count_entries(dir), 0, "the check left something behind");
    snprintf(path, sizeof path, "%s/plain", dir);
    write_text(path, "x");
    cr_assert_eq(file_check_writable(path, 0, err, sizeof err), 0, "an existing file: %s", err);
    expect_text(path, "x");  // not truncated
    snprintf(path, sizeof path, "%s/plain/x.csv", dir);
    for (int mk = 0; mk < 2; mk++) {
        cr_assert_eq(file_check_writable(path, mk, err, sizeof err), -1);
        cr_assert(strstr(err, "cannot write ") && strstr(err, "plain/x.csv") && strstr(err, "Not a directory"), "%s", err);
    }
    cr_assert_eq(file_check_writable(dir, 0, err, sizeof err), -1, "a directory is not a file");
    cr_assert(strstr(err, "Is a directory"), "%s", err);
    cr_assert_eq(file_check_writable("/proc/cs336-no-such.csv", 1, err, sizeof err), -1);
    cr_assert(strstr(err, "cannot write /proc/cs336-no-such.csv: "), "%s", err);
    cr_assert_eq(file_check_writable("", 0, err, sizeof err), -1);
}

Test(fileio, file_name_check_reasons) {
    char err[256];
    cr_assert_eq(file_name_check("accumulation", err, sizeof err), 0);
    cr_assert_eq(file_name_check("", err, sizeof err), -1);
    cr_assert(strstr(err, "empty"), "%s", err);
    cr_assert_eq(file_name_check("a/b/c", err, sizeof err), -1);
    cr_assert(strstr(err, "'a/b/c'") && strstr(err, "contains '/'"), "%s", err);
    cr_assert_eq(file_name_check(".csv", err, sizeof err), -1);
    cr_assert(strstr(err, "hidden"), "%s", err);
}

Test(fileio, outset_new_directory_appears_whole) {
    const char* base = fresh_dir("set_new");
    char dir[600], err[512], path[700];
    snprintf(dir, sizeof dir, "%s/deeper/run", base);
    outset_t* s = outset_open(dir, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    write_text(outset_path(s, "a.txt"), "A\n");
    write_text(outset_path(s, "b.txt"), "B\n");
    cr_assert(!exists(dir), "%s is visible before the commit", dir);
    cr_assert_eq(outset_commit(s, err, sizeof err), 0, "%s", err);
    snprintf(path, sizeof path, "%s/a.txt", dir);
    expect_text(path, "A\n");
    snprintf(path, sizeof path, "%s/b.txt", dir);
    expect_text(path, "B\n");
    cr_assert_eq(count_entries(dir), 2);
    snprintf(path, sizeof path, "%s/deeper", base);
    cr_assert_eq(count_entries(path), 1, "a temporary directory was left beside %s", dir);
}

Test(fileio, outset_existing_directory_files_replaced) {
    const char* dir = fresh_dir("set_old");
    char err[512], path[700];
    snprintf(path, sizeof path, "%s/a.txt", dir);
    write_text(path, "old\n");
    outset_t* s = outset_open(dir, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    write_text(outset_path(s, "a.txt"), "new\n");
    expect_text(path, "old\n");
    cr_assert_eq(outset_commit(s, err, sizeof err), 0, "%s", err);
    expect_text(path, "new\n");
    cr_assert_eq(count_entries(dir), 1, "the temporary directory is gone");
}

// The case from the issue: a later file of the set cannot be written, the earlier ones stayed.
Test(fileio, outset_blocked_target_keeps_none_of_the_set) {
    const char* dir = fresh_dir("set_blocked");
    char err[512], path[700];
    snprintf(path, sizeof path, "%s/dV.npy", dir);
    cr_assert_eq(mkdir_p(path), 0);  // a directory where the last file should go
    outset_t* s = outset_open(dir, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    write_text(outset_path(s, "dQ.npy"), "q");
    write_text(outset_path(s, "dK.npy"), "k");
    write_text(outset_path(s, "dV.npy"), "v");
    cr_assert_eq(outset_commit(s, err, sizeof err), -1);
    cr_assert(strstr(err, "dV.npy") && strstr(err, "is a directory"), "%s", err);
    cr_assert_eq(count_entries(dir), 1, "only the blocking directory may remain");
}

Test(fileio, outset_abort_removes_what_it_made) {
    const char* base = fresh_dir("set_abort");
    char dir[600], err[512];
    snprintf(dir, sizeof dir, "%s/x/y/z", base);
    outset_t* s = outset_open(dir, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    write_text(outset_path(s, "a.txt"), "A\n");
    outset_abort(s);
    cr_assert_eq(count_entries(base), 0, "the parents made for the set must go too");
}

static void child_set_then_exit(void* p) {
    char err[512];
    outset_t* s = outset_open((const char*)p, err, sizeof err);
    if (!s) exit(10);
    FILE* f = afile_open(outset_path(s, "half.npy"));  // a file still being written, too
    if (!f) exit(11);
    fputs("never committed\n", f);
    write_text(outset_path(s, "whole.npy"), "written\n");
    exit(2);  // as fail() does
}

Test(fileio, outset_exit_before_commit_leaves_nothing) {
    const char* base = fresh_dir("set_exit");
    char dir[600], out[256];
    snprintf(dir, sizeof dir, "%s/new/run", base);
    cr_assert_eq(run_child(child_set_then_exit, dir, out, sizeof out), 2, "%s", out);
    cr_assert_eq(count_entries(base), 0, "a dying run left something behind");
    cr_assert_eq(run_child(child_set_then_exit, (void*)base, out, sizeof out), 2, "%s", out);
    cr_assert_eq(count_entries(base), 0, "a dying run left something in an existing directory");
}

Test(fileio, outset_open_says_why_not) {
    const char* base = fresh_dir("set_refused");
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/plain", base);
    write_text(path, "x");
    cr_assert_null(outset_open(path, err, sizeof err));
    cr_assert(strstr(err, "is not a directory"), "%s", err);
    snprintf(path, sizeof path, "%s/plain/run", base);
    cr_assert_null(outset_open(path, err, sizeof err));
    cr_assert(strstr(err, "Not a directory"), "%s", err);
    cr_assert_null(outset_open("/proc/cs336-no-such", err, sizeof err));
    cr_assert(strstr(err, "cannot create the directory /proc/cs336-no-such: "), "%s", err);
    cr_assert_eq(count_entries(base), 1);
}
