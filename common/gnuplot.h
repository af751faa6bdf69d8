// Rendering a gnuplot script to a PNG, for every plot of the workbook (memory timelines,
// pipeline schedules, ...). The caller writes the script; this runs gnuplot, tries the nicer
// pngcairo terminal first and plain png (libgd, minimal gnuplot builds) second, writes to a
// temporary name and renames it into place (a PNG appears whole or not at all), and keeps
// gnuplot's own error message for the caller.
#pragma once
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

// Writes the whole script for terminal `term` ("pngcairo" or "png") drawing into `out`.
typedef void (*gnuplot_script_fn)(FILE* gp, const char* term, const char* out, void* ctx);

int gnuplot_available(void);  // 1 if `gnuplot` is on the PATH
// 0, or -1 with the reason in err (gnuplot missing, the PNG's directory not writable, gnuplot's
// own words when it failed).
int gnuplot_png(const char* png, gnuplot_script_fn script, void* ctx, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
