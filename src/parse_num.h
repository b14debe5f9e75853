/* Number parsers for settings (parse_num.c). Each parses a whole text; NULL on success, else why
 * not ("is not an integer", "has trailing text ...", "is out of range ..."), to follow the
 * variable and its value in a message. */
#ifndef TUTTI_PARSE_NUM_H_
#define TUTTI_PARSE_NUM_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

const char *tutti_parse_int(const char *text, int64_t *out);
const char *tutti_parse_double(const char *text, double *out);

#ifdef __cplusplus
}
#endif

#endif
