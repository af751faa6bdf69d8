// Output files that never exist half-written: write to "path.tmp.PID", then rename into place.
// A program that dies (die/fail/exit) before afile_commit leaves no file behind: an atexit
// handler removes every temporary still open.
#pragma once
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

FILE* afile_open(const char* path);  // NULL (errno set) if the temporary cannot be created
int afile_commit(FILE* f);           // flush, close, rename; 0 on success, -1 on failure (temp removed)
void afile_abort(FILE* f);           // close and remove the temporary
int mkdir_p(const char* dir);        // like mkdir -p; 0 on success, -1 (errno set) on failure
int mkdir_parent(const char* path);  // mkdir -p of the directory part of `path` (none: 0)

#ifdef __cplusplus
}
#endif
