// One table printer for every benchmark: Markdown on stdout, CSV and JSON files.
//   table_t* t = table_new("flash forward", 3, (const char*[]){"N", "ms", "TFLOP/s"});
//   table_row(t); table_cell(t, "%d", n); table_cell(t, "%.3f", ms); table_cell(t, "%.1f", tf);
//   table_print_md(t, stdout); table_write_csv(t, "results/x.csv"); table_free(t);
// Files are written atomically; a cell that parses as a number is a JSON number.
#pragma once
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct table table_t;

table_t* table_new(const char* title, int ncols, const char* const* headers);
void table_row(table_t* t);  // start a new row
__attribute__((format(printf, 2, 3))) void table_cell(table_t* t, const char* fmt, ...);
void table_print_md(const table_t* t, FILE* out);
int table_write_csv(const table_t* t, const char* path);   // 0 on success; dies never
int table_write_json(const table_t* t, const char* path);  // 0 on success
int table_nrows(const table_t* t);
const char* table_get(const table_t* t, int row, int col);
void table_free(table_t* t);

#ifdef __cplusplus
}
#endif
