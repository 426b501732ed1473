/*
 * Module-internal helpers of core/ckpt (not installed, not for other modules): one definition
 * of the message formatting that every ckpt source uses.
 */
#ifndef SRT_CKPT_CK_UTIL_H
#define SRT_CKPT_CK_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Format a one-line message into err[errlen] (nothing when err is NULL or errlen is 0) and
 * return `code`, so that a failure reads `return errf(err, errlen, SRT_E..., "...", ...);`. */
static inline int errf(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static inline int errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

/* "[d0, d1, ...]" into buf[len] (cut when it does not fit). */
static inline void fmt_shape(char *buf, size_t len, uint32_t ndim, const int64_t *shape)
{
	size_t o = (size_t)snprintf(buf, len, "[");
	for (uint32_t d = 0; d < ndim && o < len; d++)
		o += (size_t)snprintf(buf + o, len - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
	if (o < len)
		snprintf(buf + o, len - o, "]");
}

#endif
