/*
 * Byte sizes as users write them, one parser for every size option (command-line flags and
 * INI/config values alike), so that "16GiB" means the same everywhere.
 *
 * Syntax: a decimal number, optionally with a fraction, then optional spaces and an optional
 * unit, case-insensitive:
 *   B                        bytes
 *   KB  MB  GB  TB  PB  EB   powers of 1000 (SI):      1GB  = 10^9 bytes
 *   KiB MiB GiB TiB PiB EiB  powers of 1024 (IEC):     1GiB = 2^30 bytes
 *   K   M   G   T   P   E    powers of 1024, as the bare letters always meant here
 * The value must be a whole number of bytes ("1.5KiB" = 1536; "0.1" is refused) and at most
 * SRT_SIZE_MAX (2^63 - 1, about 8 EiB). Refused with a reason: empty strings, signs, exponents
 * ("1e30"), "inf", "nan", hex, unknown units ("4X", "4 G B"), more than 18 decimals, values above
 * SRT_SIZE_MAX ("18446744073709551615"), trailing garbage.
 *
 * Words such as "unbounded" or "none" are the caller's to recognise before calling.
 */
#ifndef SRT_CONFIG_SIZE_H
#define SRT_CONFIG_SIZE_H

#include <stddef.h>
#include <stdint.h>

#define SRT_SIZE_MAX ((uint64_t)INT64_MAX)

/*
 * Parse s into *out (bytes). Returns 0, or SRT_EINVAL with *out untouched and err set to
 * "'<s>': <reason>" (the caller prefixes the option or key name). err may be NULL.
 */
int srt_size_parse(const char *s, uint64_t *out, char *err, size_t errlen);

#endif
