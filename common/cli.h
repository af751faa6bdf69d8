// Command-line parsing shared by every program.
//   int steps = 0; const char* model = NULL;
//   cli_opt_t opts[] = {
//       {"steps", CLI_INT,    &steps, "10",    "measured steps", NULL},
//       {"model", CLI_CHOICE, &model, "small", "model size",     "tiny|small|medium"},
//   };
//   cli_parse(argc, argv, "what this program does", opts, CLI_COUNT(opts));
// Flags are --name value or --name=value. --help lists every flag with its default and exits 0.
// An unknown flag, a missing value or a bad value is one line naming the flag and what is
// allowed, then exit 2.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CLI_INT,     // int*: decimal integer
    CLI_SIZE,    // int64_t*: integer with optional K, M, G suffix (powers of 1024): 1M = 1048576
    CLI_DOUBLE,  // double*
    CLI_STR,     // const char**: any string
    CLI_CHOICE,  // const char**: one of `choices`, "a|b|c"
    CLI_FLAG,    // int*: present -> 1 (no value); default "0"
} cli_type_t;

typedef struct {
    const char* name;     // without the leading --
    cli_type_t type;
    void* dest;
    const char* def;      // default, as it would be typed; NULL means required (CLI_STR only)
    const char* help;
    const char* choices;  // CLI_CHOICE only
} cli_opt_t;

#define CLI_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

// 0: parsed; 1: --help was asked for; -1: error, reason in err. Defaults are applied first.
int cli_parse_err(int argc, char** argv, cli_opt_t* opts, int nopts, char* err, size_t errlen);
// Parses or exits: --help prints usage to stdout and exits 0; an error exits 2.
void cli_parse(int argc, char** argv, const char* summary, cli_opt_t* opts, int nopts);
void cli_print_help(FILE* out, const char* prog, const char* summary, const cli_opt_t* opts, int nopts);

// "4096", "1K", "10M", "1G" -> bytes/count. 0 on success, -1 if it does not parse or overflows.
int parse_size(const char* s, int64_t* out);
// Is `s` one of "a|b|c"? 1 or 0.
int choice_ok(const char* choices, const char* s);
// Splits a comma list of sizes ("128,256,1K") into out (at most max). Returns the count or -1.
int parse_size_list(const char* s, int64_t* out, int max);
// Is `s` a comma list without an empty item (not empty, no ",,", no leading or trailing
// comma)? 0, or -1 with "--flag: 'a,,b' has an empty item (a comma list, e.g. a,b)" in err.
// For programs that split the list themselves (strtok would skip an empty item silently).
int list_check_items(const char* flag, const char* s, char* err, size_t errlen);
// Is every item of the comma list `s` one of `choices` ("a|b|c"), with no empty item? 0, or -1
// with "--flag: 'x' is not one of a|b|c (a comma list, e.g. a,b)" in err.
int choice_list_check(const char* flag, const char* s, const char* choices, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
