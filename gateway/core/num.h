/*
 * num.h - bounded number parsing (the replacement for atoi and friends).
 */
#ifndef SB_CORE_NUM_H
#define SB_CORE_NUM_H

#include <stdint.h>

/* Parses the whole of s as a base-10 integer in [min, max]. Leading and
 * trailing garbage, empty strings and overflow are SB_ERR_INVAL; a value out
 * of range is SB_ERR_TOOBIG. *out is written only on SB_OK. Any thread. */
int num_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
int num_parse_u64(const char *s, uint64_t max, uint64_t *out);

/* Parses a duration such as "250ms", "30s", "5m", "2h", "1d" or a bare number
 * of milliseconds into milliseconds. */
int num_parse_duration_ms(const char *s, int64_t *out_ms);

/* Parses a size such as "64KiB", "10MiB", "1GiB", "512" (bytes). */
int num_parse_size(const char *s, int64_t *out_bytes);

#endif
