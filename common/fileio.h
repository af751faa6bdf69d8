// Output files that never exist half-written: write to "path.tmp.PID", then rename into place.
// A program that dies (die/fail/exit) before afile_commit leaves no file behind: an atexit
// handler removes every temporary still open.
#pragma once
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

FILE* afile_open(const char* path);  // NULL (errno set) if the temporary cannot be created
int afile_commit(FILE* f);           // flush, close, rename; 0 on success, -1 on failure (temp removed)
void afile_abort(FILE* f);           // close and remove the temporary
int mkdir_p(const char* dir);        // like mkdir -p; 0 on success, -1 (errno set) on failure
int mkdir_parent(const char* path);  // mkdir -p of the directory part of `path` (none: 0)

// Checks made before a long run, so that a bad output place fails at once, not at the end.
// Can files be created in `dir`? It need not exist yet: its nearest existing ancestor must be a
// directory we can create entries in (tried with a probe directory that is removed again).
// Nothing is created. 0, or -1 with the reason in err ("cannot create files in /proc: No such
// file or directory", "results/x is not a directory").
int dir_check_writable(const char* dir, char* err, size_t errlen);
// Can the file `path` be written: created, or (if it exists) appended to or replaced? With
// `make_parents`, its directory may be missing (it would be created: checked as above); without,
// the directory must exist. Nothing is created or changed. 0, or -1 with the path and the
// system's reason in err ("cannot write /etc/passwd/x.csv: Not a directory").
int file_check_writable(const char* path, int make_parents, char* err, size_t errlen);
// Is `name` a plain file name (for flags such as --csv that name a file inside --out)? Not
// empty, no '/', not starting with '.' (a hidden file). 0, or -1 with the reason in err.
int file_name_check(const char* name, char* err, size_t errlen);

// Output sets: the files of one run (dQ.npy, dK.npy, dV.npy, ...) appear together or not at all.
//   outset_t* s = outset_open("results/run", err, sizeof err);  // NULL: cannot write there (err)
//   npy_write(outset_path(s, "dQ.npy"), ...);  npy_write(outset_path(s, "dK.npy"), ...);
//   if (outset_commit(s, err, sizeof err) != 0) ...              // every file in place, or none
// The files are written into a private temporary directory (beside `dir` when `dir` is new, so
// that the commit is one rename of the whole directory; inside it otherwise, then each file is
// renamed over its target after checking that every target can be replaced). A set that is
// aborted, or open when the process exits (die, fail, exit), is removed with the temporary
// directory and any parent directories outset_open created: a failed run leaves nothing.
typedef struct outset outset_t;
outset_t* outset_open(const char* dir, char* err, size_t errlen);
// Where to write `name` (a plain file name) now; the path stays valid until commit or abort.
const char* outset_path(outset_t* s, const char* name);
int outset_commit(outset_t* s, char* err, size_t errlen);  // 0, or -1 with the reason (nothing kept)
void outset_abort(outset_t* s);

#ifdef __cplusplus
}
#endif
