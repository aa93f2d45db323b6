/*
 * config.h: config files of "key = value" lines (`mxlm train --config FILE`,
 * and the run directory's config.txt that mx_train_config_text writes) turned
 * into argv-style option tokens for the CLI's option parser.
 *
 * Grammar, one line at a time (lines end at '\n'; a '\r' before it, like all
 * whitespace at either end of a key or a value, is trimmed; the last line
 * needs no '\n'):
 *   - blank lines and lines whose first non-blank byte is '#' are skipped
 *     (a '#' later in a line is part of the value);
 *   - otherwise "key = value": split at the first '=', key and value trimmed
 *     (C-locale isspace); the key must not be empty; the value may be;
 *   - the key "config" is refused (a config file cannot include another);
 *   - a flag key (mx_config_key.flag) takes true/1/yes (the token "--key")
 *     or false/0/no (no token); any other value is an error;
 *   - any other key gives the one token "--key=value";
 *   - a value written between double quotes ("...") is read with C escapes
 *     (\\ \" \n \t \r \xNN), so it may hold any byte but NUL: leading or
 *     trailing blanks, newlines, tabs, quotes, backslashes. mxlm writes a
 *     value that way exactly when it must (mx_config_value_write); any other
 *     value is taken as it is, backslashes included.
 * A line yields at most one token, so argc <= the number of lines. Lines may
 * be of any length (within the MX_CONFIG_MAX_BYTES of the whole text); a NUL
 * byte anywhere is an error. Errors are "ORIGIN:LINE: message" (mx_fail).
 */
#ifndef MXLM_CONFIG_H
#define MXLM_CONFIG_H
#include <stddef.h>
#include "mxlm/mx.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MX_CONFIG_MAX_BYTES (1 << 20) /* a config is a few hundred bytes; 1 MiB is a wrong file */

/* A key a config may hold; an array of them ends with name == NULL. */
typedef struct {
    const char* name; /* without dashes, e.g. "steps" */
    int flag;         /* 1: a flag (no value on the command line) */
} mx_config_key;

/* Parse `len` bytes of `text` (need not be NUL-terminated). `keys`: the keys
 * allowed (NULL: any key, none a flag); an unknown key is an error naming its
 * line. On success *argv_out holds *argc_out malloc'ed tokens, each starting
 * with "--" (the array itself malloc'ed, never NULL); free with
 * mx_config_free. On error *argv_out = NULL, *argc_out = 0 and a negative
 * mx_err is returned. `origin` names the text in messages (e.g. its path). */
int mx_config_tokens(const char* text, size_t len, const char* origin, const mx_config_key* keys, char*** argv_out,
                     int* argc_out);
/* Read the file `path` (at most MX_CONFIG_MAX_BYTES) and parse it as above,
 * with the path as the origin. */
int mx_config_load(const char* path, const mx_config_key* keys, char*** argv_out, int* argc_out);
/* The one pair of functions of a value's text: write v as a value (as it is, or quoted and escaped when a
 * reader would not get it back otherwise: blanks at either end, a leading '"', control bytes) into out (n
 * bytes; 4 x strlen(v) + 3 is always enough); returns the length (snprintf semantics). Read: the value
 * text v[0..len) (trimmed) into out (n bytes, NUL-terminated); returns the length, or -1 on a malformed
 * quoted value (a bad escape, a \x00, no closing quote). */
int mx_config_value_write(const char* v, char* out, size_t n);
int mx_config_value_read(const char* v, size_t len, char* out, size_t n);
/* The value of the first "key = value" line of text (config.txt, a checkpoint fingerprint) into out (n
 * bytes), read as above: 1 found, 0 not (or malformed, or longer than out: never cut short). */
int mx_config_get(const char* text, const char* key, char* out, size_t n);

/* Free what mx_config_tokens / mx_config_load returned (NULL is fine). */
void mx_config_free(char** argv, int argc);

#ifdef __cplusplus
}
#endif
#endif
