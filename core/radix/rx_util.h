/*
 * Module-internal helper of core/radix (radix.c and geometry.c; not for other modules): one
 * definition of the error-message formatting.
 */
#ifndef SRT_RADIX_RX_UTIL_H
#define SRT_RADIX_RX_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Format a one-line message into err[len]; nothing when err is NULL or len is 0. */
static inline void seterr(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static inline void seterr(char *err, size_t len, const char *fmt, ...)
{
	if (!err || !len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

#endif
