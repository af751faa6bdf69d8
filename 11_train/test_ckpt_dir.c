// The checkpoint directory and the data's identity (README: "Checkpoints and resume"), end to end
// on the CPU (--backend mpi, also on GPU hosts) under scripts/mpirun.sh: retention removes only
// this run's complete older checkpoints (a damaged newer one and another run's are never touched);
// a fresh run refuses a directory that holds checkpoints and --resume one that holds none; rank 0's
// lock refuses a second job and takes over the lock of a dead one; ranks whose launcher was killed
// write no more checkpoints; a resume on another token file is refused unless told; a token file
// rewritten or truncated under a running job ends it with one line naming the file.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include "11_train/checkpoint.h"
#include "common/timer.h"
#include "tests/harness.h"

static char g_log[1 << 17];
static char g_why[2048];


// A private copy of a byte-level corpus (the license texts, else the READMEs) at `name`: the
// tests below change their copy under a running job.
static const char* corpus_copy(const char* name) {
    const char* path = test_path(name);
    struct stat st;
    const char* in = stat("/usr/share/common-licenses/GPL-3", &st) == 0
                         ? "/usr/share/common-licenses"
                         : "README.md,05_collectives/README.md,06_ddp/README.md,07_zero/README.md,08_pipeline/README.md";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/11_train/tokenize --in %s --out %s", build_dir(), in, path);
    const int rc = run_capture(cmd, g_log, sizeof g_log);
    cr_assert_eq(rc, 0, "tokenize exited %d:\n%s", rc, g_log);
    return path;
}

#define COMMON "--backend mpi --context 16 --batch 4 --log-every 100 --eval-every 0"

// One job of np ranks, waited for: its exit status, its output in g_log.
__attribute__((format(printf, 3, 4))) static int train(int np, const char* data, const char* fmt, ...) {
    char args[1024], cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "MPIRUN_TIMEOUT=120 scripts/mpirun.sh %d %s/11_train/train --data %s %s", np, build_dir(), data, args);
    return run_capture(cmd, g_log, sizeof g_log);
}

// One job started in the background (its output into `log`); returns the pid to wait for.
static pid_t train_bg(int np, const char* data, const char* args, const char* log) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "MPIRUN_TIMEOUT=120 exec scripts/mpirun.sh %d %s/11_train/train --data %s %s > %s 2>&1", np,
             build_dir(), data, args, log);
    const pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork failed");
    if (pid == 0) {
        for (int fd = 3; fd < 1024; fd++) close(fd);  // none of the test runner's descriptors
        execl("/bin/sh", "sh", "-c", cmd, (char*)NULL);
        _exit(127);
    }
    return pid;
}
// Its exit status (as run_capture gives it), or -1 if it did not end within secs.
static int wait_bg(pid_t pid, double secs) {
    const double t0 = time_now_s();
    for (;;) {
        int st;
        const pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (time_now_s() - t0 > secs) return -1;
        usleep(20 * 1000);
    }
}
static int file_has(const char* path, const char* needle) {
    FILE* f = fopen(path, "rb");
    if (!f) return 0;
    const size_t n = fread(g_log, 1, sizeof g_log - 1, f);
    fclose(f);
    g_log[n] = 0;
    return strstr(g_log, needle) != NULL;
}
static int wait_for(const char* path, const char* needle, double secs) {
    const double t0 = time_now_s();
    while (!file_has(path, needle))
        if (time_now_s() - t0 > secs) return 0;
        else usleep(20 * 1000);
    return 1;
}

// The step_* names under d, sorted, into out (one per line).
static int cmp_str(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }
static void listing(const char* d, char* out, size_t len) {
    char* names[4096];
    int n = 0;
    DIR* dd = opendir(d);
    cr_assert_not_null(dd, "%s", d);
    for (struct dirent* e; (e = readdir(dd)) && n < 4096;)
        if (strncmp(e->d_name, "step_", 5) == 0) names[n++] = strdup(e->d_name);
    closedir(dd);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        k += (size_t)snprintf(out + k, k < len ? len - k : 0, "%s\n", names[i]);
        free(names[i]);
    }
}
static int exists(const char* d, const char* name) {
    char p[800];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", d, name);
    return stat(p, &st) == 0;
}
static uint64_t run_of(const char* d, const char* step) {
    char p[800];
    ckpt_manifest_t mf;
    snprintf(p, sizeof p, "%s/%s", d, step);
    cr_assert_eq(ckpt_validate(p, &mf, g_why, sizeof g_why), 0, "%s: %s", p, g_why);
    return mf.run_id;
}
static void copy_into(const char* from, const char* to) {
    char cmd[1800];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s/'", from, to);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

// With --keep 1 and a damaged newer step_15, a run resumed from step 10 keeps what it writes:
// the damaged one is newer than anything it writes (never counted, never removed), step 10 goes
// once step 11 is complete, step 11 once step 12 is; the next --resume continues from step 12.
Test(ckpt_dir, damaged_newer_checkpoint_and_keep_1_keep_the_resumable_one, .timeout = 120) {
    const char* data = corpus_copy("c.bin");
    const char* d = test_path("dmg");
    int st = train(1, data, COMMON " --steps 20 --ckpt-every 5 --ckpt-dir %s --die-at-step 16", d);
    cr_assert_neq(st, 0, "the killed run exited 0:\n%s", g_log);
    cr_assert(exists(d, "step_000000010") && exists(d, "step_000000015"), "%s", g_log);
    char p[800];
    snprintf(p, sizeof p, "%s/step_000000015/optim_r0.bin", d);
    cr_assert_eq(truncate(p, 1000), 0);
    st = train(1, data, COMMON " --steps 12 --ckpt-every 1 --keep 1 --ckpt-dir %s --resume", d);
    cr_assert_eq(st, 0, "resume exited %d:\n%s", st, g_log);
    cr_assert(strstr(g_log, "step_000000010: step 10"), "%s", g_log);
    char l[4096];
    listing(d, l, sizeof l);
    cr_assert_str_eq(l, "step_000000012\nstep_000000015\n", "after the resume with --keep 1:\n%s", l);
    struct stat sb;
    cr_assert(stat(p, &sb) == 0 && sb.st_size == 1000, "the damaged step_15 was touched");
    st = train(1, data, COMMON " --steps 14 --ckpt-dir %s --resume", d);
    cr_assert_eq(st, 0, "the second resume exited %d:\n%s", st, g_log);
    cr_assert(strstr(g_log, "step_000000015: refused") && strstr(g_log, "step_000000012: step 12"), "%s", g_log);
}

// Another run's checkpoints (copied in beside this run's) are never removed, whatever --keep
// says (one in the way of a step this run writes is moved to step_N.kept); a fresh run refuses a directory that holds checkpoints, in one line naming the two ways
// out, and writes nothing there.
Test(ckpt_dir, another_runs_checkpoints_are_never_removed_and_a_fresh_run_refuses, .timeout = 120) {
    const char* data = corpus_copy("c.bin");
    const char* a = test_path("run_a");
    const char* b = test_path("run_b");
    int st = train(1, data, COMMON " --steps 6 --ckpt-every 1 --keep 10 --ckpt-dir %s", a);
    cr_assert_eq(st, 0, "run A exited %d:\n%s", st, g_log);
    st = train(1, data, COMMON " --steps 6 --ckpt-every 2 --keep 10 --ckpt-dir %s --die-at-step 4", b);
    cr_assert_neq(st, 0, "the killed run B exited 0:\n%s", g_log);
    const uint64_t ra = run_of(a, "step_000000001"), rb = run_of(b, "step_000000004");
    cr_assert(ra && rb && ra != rb && run_of(a, "step_000000006") == ra, "run ids %llx %llx", (unsigned long long)ra,
              (unsigned long long)rb);
    char p[800];
    snprintf(p, sizeof p, "%s/step_000000001", a);
    copy_into(p, b);
    snprintf(p, sizeof p, "%s/step_000000003", a);
    copy_into(p, b);
    // and A's step 5, damaged: B's resume refuses it, and B's own step 5 moves it aside
    snprintf(p, sizeof p, "%s/step_000000005", a);
    copy_into(p, b);
    snprintf(p, sizeof p, "%s/step_000000005/params.bin", b);
    cr_assert_eq(truncate(p, 100), 0);
    st = train(1, data, COMMON " --steps 6 --ckpt-every 1 --keep 1 --ckpt-dir %s --resume", b);
    cr_assert_eq(st, 0, "run B resumed exited %d:\n%s", st, g_log);
    cr_assert(strstr(g_log, "step_000000005: refused") && strstr(g_log, "step_000000004: step 4") &&
              strstr(g_log, "was not a complete checkpoint of this run; moved to"), "%s", g_log);
    char l[4096];
    listing(b, l, sizeof l);
    cr_assert_str_eq(l, "step_000000001\nstep_000000003\nstep_000000005.kept\nstep_000000006\n", "after B's resume with --keep 1:\n%s", l);
    snprintf(p, sizeof p, "%s/step_000000005.kept/params.bin", b);
    struct stat sb;
    cr_assert(stat(p, &sb) == 0 && sb.st_size == 100, "A's damaged step 5 was not kept as it was");
    cr_assert(run_of(b, "step_000000001") == ra && run_of(b, "step_000000003") == ra && run_of(b, "step_000000006") == rb);

    // A fresh run in A's directory: refused, nothing written.
    char before[4096], after[4096];
    listing(a, before, sizeof before);
    st = train(1, data, COMMON " --steps 8 --ckpt-every 1 --ckpt-dir %s", a);
    cr_assert_eq(st, 2, "a fresh run in a directory with checkpoints exited %d:\n%s", st, g_log);
    cr_assert(strstr(g_log, "already holds 6 checkpoints (the newest step_000000006)") && strstr(g_log, "give --resume") &&
              strstr(g_log, "another --ckpt-dir"), "%s", g_log);
    listing(a, after, sizeof after);
    cr_assert_str_eq(before, after, "the refused run changed the directory");
    // A mistyped --resume directory: refused, not a silent start from step 0; --start-if-empty
    // says start there.
    const char* nope = test_path("no_such_dir");
    st = train(1, data, COMMON " --steps 2 --ckpt-dir %s --resume", nope);
    cr_assert_eq(st, 2, "--resume of a missing directory exited %d:\n%s", st, g_log);
    cr_assert(strstr(g_log, "holds no checkpoint (it does not exist)") && !exists(nope, "."), "%s", g_log);
    st = train(1, data, COMMON " --steps 2 --ckpt-dir %s --resume --start-if-empty", nope);
    cr_assert_eq(st, 0, "--resume --start-if-empty exited %d:\n%s", st, g_log);
    cr_assert(exists(nope, "step_000000002"), "%s", g_log);
}

// The lock: a job holding DIR/lock (here the test itself, with flock as the trainer takes it)
// makes another refuse in one line naming the holder, before anything is written; a lock file
// left by a dead job (its flock gone with it) is taken over with a note, and emptied at the
// clean end. A real second job is refused by the first's lock the same way.
Test(ckpt_dir, the_lock_refuses_a_second_job_and_takes_over_a_dead_ones, .timeout = 120) {
    const char* data = corpus_copy("c.bin");
    const char* d = test_path("locked");
    cr_assert_eq(mkdir(d, 0755), 0);
    char lp[800], text[300], host[256] = "";
    snprintf(lp, sizeof lp, "%s/lock", d);
    gethostname(host, sizeof host - 1);
    int fd = open(lp, O_RDWR | O_CREAT, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(flock(fd, LOCK_EX | LOCK_NB), 0);
    int n = snprintf(text, sizeof text, "pid %d host %s launcher 0 start 1 (the test)\n", (int)getpid(), host);
    cr_assert_eq(pwrite(fd, text, (size_t)n, 0), n);
    int st = train(1, data, COMMON " --steps 2 --ckpt-every 1 --ckpt-dir %s", d);
    cr_assert_eq(st, 2, "a job on a locked directory exited %d:\n%s", st, g_log);
    snprintf(text, sizeof text, "is in use by another job (pid %d host %s", (int)getpid(), host);
    cr_assert(strstr(g_log, text), "no '%s' in:\n%s", text, g_log);
    cr_assert(!exists(d, "step_000000001"), "the refused job wrote a checkpoint");
    close(fd);

    // A dead job's lock: a child that wrote it and exited.
    const pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        int f = open(lp, O_RDWR | O_TRUNC);
        if (f < 0 || flock(f, LOCK_EX) != 0) _exit(1);
        char t2[300];
        const int k = snprintf(t2, sizeof t2, "pid %d host %s launcher 0 start 1 (a dead job)\n", (int)getpid(), host);
        _exit(pwrite(f, t2, (size_t)k, 0) == k ? 0 : 1);
    }
    int cst;
    cr_assert(waitpid(child, &cst, 0) == child && WIFEXITED(cst) && WEXITSTATUS(cst) == 0);
    st = train(1, data, COMMON " --steps 2 --ckpt-every 1 --ckpt-dir %s", d);
    cr_assert_eq(st, 0, "a job on a dead job's lock exited %d:\n%s", st, g_log);
    snprintf(text, sizeof text, "taking over the lock of a job that ended without releasing it (pid %d host %s", (int)child, host);
    cr_assert(strstr(g_log, text), "no '%s' in:\n%s", text, g_log);
    struct stat sb;
    cr_assert(stat(lp, &sb) == 0 && sb.st_size == 0, "the lock file was not emptied at the clean end");

    // Two real jobs: the second (a --resume of the first's directory) is refused while the first runs.
    const char* log = test_path("first.log");
    const char* d2 = test_path("two_jobs");
    char args[600];
    snprintf(args, sizeof args, COMMON " --steps 20000 --ckpt-every 50 --log-every 1 --ckpt-dir %s", d2);
    const pid_t job = train_bg(1, data, args, log);
    cr_assert(wait_for(log, "step     60/", 60), "the first job did not get going:\n%s", g_log);
    char holder[800];
    snprintf(holder, sizeof holder, "%s/lock", d2);
    cr_assert(file_has(holder, "pid "), "no lock content");
    long rank0 = 0;
    cr_assert(sscanf(g_log, "pid %ld host", &rank0) == 1, "%s", g_log);
    st = train(1, data, COMMON " --steps 20000 --ckpt-every 50 --ckpt-dir %s --resume", d2);
    cr_assert_eq(st, 2, "the second job exited %d:\n%s", st, g_log);
    snprintf(text, sizeof text, "is in use by another job (pid %ld host %s", rank0, host);
    cr_assert(strstr(g_log, text), "no '%s' in:\n%s", text, g_log);
    cr_assert_eq(kill((pid_t)rank0, SIGTERM), 0);  // the first job saves and stops
    cr_assert_eq(wait_bg(job, 60), 0, "the first job, stopped by SIGTERM, did not end cleanly:\n%s", (file_has(log, ""), g_log));
}

// kill -9 of mpirun: its ranks must not go on committing (or removing) checkpoints. A job that
// checkpoints every step is started; once mpirun is gone (rank 0 re-parented), the directory is
// listed, then again 3 s and 5 s later: the same. A --resume started right away then runs
// (it waits for a leftover rank 0 that still holds the lock) and nothing is deleted under it.
// Has `pid` left its parent `parent` (the parent died and it was re-parented), or ended? (With
// parent 0: has it ended — gone, or a zombie nobody reaped?)
static int orphaned(long pid, long parent) {
    char p[64], l[512];
    snprintf(p, sizeof p, "/proc/%ld/stat", pid);
    FILE* f = fopen(p, "r");
    if (!f) return 1;
    const int got = fgets(l, sizeof l, f) != NULL;
    fclose(f);
    const char* e = got ? strrchr(l, ')') : NULL;  // "pid (comm) S ppid ..."
    char s;
    long pp;
    if (!e || sscanf(e + 1, " %c %ld", &s, &pp) != 2) return 1;
    return s == 'Z' || s == 'X' || (parent && pp != parent);
}
Test(ckpt_dir, a_killed_launcher_leaves_no_checkpoint_written_after_it, .timeout = 120) {
    const char* data = corpus_copy("c.bin");
    const char* d = test_path("orphans");
    const char* log = test_path("orphans.log");
    char args[600], lp[800];
    snprintf(args, sizeof args, COMMON " --dp --steps 100000 --ckpt-every 1 --log-every 1 --ckpt-dir %s", d);
    const pid_t job = train_bg(2, data, args, log);
    cr_assert(wait_for(log, "step     30/", 60), "the job did not get going:\n%s", g_log);
    snprintf(lp, sizeof lp, "%s/lock", d);
    cr_assert(file_has(lp, "launcher "), "no lock content");
    long rank0 = 0, launcher = 0;
    cr_assert(sscanf(g_log, "pid %ld host %*s launcher %ld", &rank0, &launcher) == 2 && launcher > 1, "%s", g_log);
    cr_assert_eq(kill((pid_t)launcher, SIGKILL), 0);
    const double t0 = time_now_s();
    while (!orphaned(rank0, launcher)) {  // mpirun wholly gone (all its threads): rank 0 re-parented
        cr_assert(time_now_s() - t0 < 10, "mpirun %ld did not die", launcher);
        usleep(1000);
    }
    // A commit whose check ran before that instant may still be finishing its rename: 0.3 s
    // for it (the ranks wrote a checkpoint every ~20-50 ms before the kill).
    usleep(300 * 1000);
    char a[1 << 14], b[1 << 14], c[1 << 14];
    listing(d, a, sizeof a);
    cr_assert(strlen(a) > 0, "no checkpoint before the kill");
    sleep(3);
    listing(d, b, sizeof b);
    sleep(2);
    listing(d, c, sizeof c);
    cr_assert_str_eq(a, b, "checkpoints changed in the 3 s after mpirun died:\n%s\nthen\n%s", a, b);
    cr_assert_str_eq(b, c, "checkpoints changed between 3 s and 5 s after mpirun died");
    cr_assert(orphaned(rank0, 0), "rank 0 (pid %ld) still runs 5 s after its launcher died", rank0);
    wait_bg(job, 30);
    const char* last = strrchr(c, '\n');  // the newest name: the last line
    while (last > c && last[-1] != '\n') last--;
    long long newest = -1;
    cr_assert(sscanf(last, "step_%lld", &newest) == 1, "%s", c);
    const int st = train(2, data, COMMON " --dp --steps %lld --ckpt-every 1 --ckpt-dir %s --resume", newest + 3, d);
    cr_assert_eq(st, 0, "the resume after the orphans exited %d:\n%s", st, g_log);
    char want[64];
    snprintf(want, sizeof want, "step_%09lld: step %lld", newest, newest);
    cr_assert(strstr(g_log, want), "no '%s' in:\n%s", want, g_log);
}

// The manifest records the token file (path, size, modification time, checksum of the whole
// file or of 64 sampled pieces). A resume on a file of other bytes (one byte changed) is refused
// in one line naming both files, writes nothing, and is accepted with --data-changed-ok; the
// same bytes at another path are accepted with a note.
Test(ckpt_dir, a_resume_on_another_token_file_is_refused_unless_told, .timeout = 120) {
    const char* c1 = corpus_copy("d1.bin");
    const char* c2 = corpus_copy("d2.bin");
    const char* c3 = corpus_copy("d3.bin");
    FILE* f = fopen(c2, "r+b");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    const long mid = ftell(f) / 2;
    fseek(f, mid, SEEK_SET);
    const int ch = fgetc(f);
    fseek(f, mid, SEEK_SET);
    fputc(ch == 'e' ? 'a' : 'e', f);  // another byte token (< 256)
    fclose(f);
    const char* d = test_path("data_id");
    int st = train(1, c1, COMMON " --steps 4 --ckpt-every 2 --ckpt-dir %s", d);
    cr_assert_eq(st, 0, "exited %d:\n%s", st, g_log);
    char p[800];
    snprintf(p, sizeof p, "%s/step_000000004", d);
    ckpt_manifest_t mf;
    cr_assert_eq(ckpt_validate(p, &mf, g_why, sizeof g_why), 0, "%s", g_why);
    struct stat sb;
    cr_assert_eq(stat(c1, &sb), 0);
    char* real1 = realpath(c1, NULL);
    cr_assert(mf.has_data && strcmp(mf.data.path, real1) == 0 && mf.data.bytes == (uint64_t)sb.st_size && !mf.data.sampled,
              "data %d %s %llu", mf.has_data, mf.data.path, (unsigned long long)mf.data.bytes);
    st = train(1, c2, COMMON " --steps 6 --ckpt-every 2 --ckpt-dir %s --resume", d);
    cr_assert_eq(st, 2, "a resume on another file exited %d:\n%s", st, g_log);
    cr_assert(strstr(g_log, "is not the token file") && strstr(g_log, real1) && strstr(g_log, "checksum") &&
              strstr(g_log, "--data-changed-ok"), "%s", g_log);
    cr_assert(!exists(d, "step_000000006"), "the refused resume wrote a checkpoint");
    st = train(1, c2, COMMON " --steps 6 --ckpt-every 2 --ckpt-dir %s --resume --data-changed-ok", d);
    cr_assert_eq(st, 0, "--data-changed-ok exited %d:\n%s", st, g_log);
    cr_assert(strstr(g_log, "resume: note: --data-changed-ok: training on"), "%s", g_log);
    // the checkpoint now names the file it goes on with; the same bytes elsewhere pass, noted
    st = train(1, c1, COMMON " --steps 8 --ckpt-every 2 --ckpt-dir %s --resume", d);
    cr_assert_eq(st, 2, "back on the first file exited %d:\n%s", st, g_log);
    snprintf(p, sizeof p, "cp '%s' '%s'", c2, c3);
    cr_assert_eq(system(p), 0);
    st = train(1, c3, COMMON " --steps 8 --ckpt-every 2 --ckpt-dir %s --resume", d);
    cr_assert_eq(st, 0, "the same bytes at another path exited %d:\n%s", st, g_log);
    cr_assert(strstr(g_log, "holds the same bytes as"), "%s", g_log);
    free(real1);
    // ckpt_data_identity's coverage: a file over 4 MiB is sampled in 64 pieces (the whole file
    // below); a byte changed inside a piece changes the checksum, the size is always covered.
    const char* big = test_path("big.bin");
    f = fopen(big, "wb");
    cr_assert_not_null(f);
    for (int i = 0; i < (5 << 20); i++) fputc(i * 7 & 0xff, f);
    fclose(f);
    ckpt_data_t a, b;
    cr_assert_eq(ckpt_data_identity(big, &a, g_why, sizeof g_why), 0, "%s", g_why);
    cr_assert(a.sampled && a.bytes == (5u << 20));
    f = fopen(big, "r+b");
    fseek(f, (5 << 20) - 10, SEEK_SET);  // inside the last piece
    fputc(1, f);
    fclose(f);
    cr_assert_eq(ckpt_data_identity(big, &b, g_why, sizeof g_why), 0, "%s", g_why);
    cr_assert(!ckpt_data_same(&a, &b, g_why, sizeof g_why) && strstr(g_why, "sampled bytes"), "%s", g_why);
    cr_assert_eq(truncate(big, (5 << 20) - 1), 0);
    cr_assert_eq(ckpt_data_identity(big, &b, g_why, sizeof g_why), 0, "%s", g_why);
    cr_assert(!ckpt_data_same(&a, &b, g_why, sizeof g_why) && strstr(g_why, "bytes then"), "%s", g_why);
}

// A token file rewritten in place under a running job (same size, other bytes: the mapping
// shows them at once) ends the job at its next evaluation with one line naming the file, exit
// 2; one truncated under it ends it at the first read past the new end with the SIGBUS line
// naming the file, exit 2 (not a crash).
static void change_under_a_job(const char* name, int truncate_it) {
    const char* data = corpus_copy(name);
    char* real = realpath(data, NULL);
    const char* log = test_path(truncate_it ? "trunc.log" : "rewrite.log");
    // (truncated: no evaluation, so that no check of the file sees the change before a read does)
    const pid_t job = train_bg(1, data, truncate_it ? "--backend mpi --context 16 --batch 4 --log-every 1 --steps 5000 --eval-every 0"
                                                    : "--backend mpi --context 16 --batch 4 --log-every 1 --steps 5000 --eval-every 10", log);
    cr_assert(wait_for(log, "step     15/", 60), "the job did not get going:\n%s", g_log);
    if (truncate_it) {
        cr_assert_eq(truncate(data, 4096), 0);
    } else {
        FILE* f = fopen(data, "r+b");
        cr_assert_not_null(f);
        fseek(f, 2048, SEEK_SET);
        for (int i = 0; i < 4096; i++) fputc('a' + i % 26, f);
        fclose(f);
    }
    const int st = wait_bg(job, 60);
    file_has(log, "");
    cr_assert_eq(st, 2, "the job exited %d:\n%s", st, g_log);
    char want[800];
    if (truncate_it) snprintf(want, sizeof want, "train: error: %s: the token file was truncated while mapped", data);
    else snprintf(want, sizeof want, "--data: %s changed during training", real);
    cr_assert(strstr(g_log, want), "no '%s' in:\n%s", want, g_log);
    free(real);
}
Test(ckpt_dir, a_token_file_rewritten_under_a_job_ends_it_in_one_line, .timeout = 120) { change_under_a_job("rw.bin", 0); }
Test(ckpt_dir, a_token_file_truncated_under_a_job_ends_it_with_the_sigbus_line, .timeout = 120) {
    change_under_a_job("tr.bin", 1);
}
