/*
 * The file store's segment layout (option layout = segments): objects are appended to log files
 * <path>/seg/<id>.log (16 hex digits, ids never reused), each object a record
 *
 *     header (64 bytes: magic "SRTSEG01", type, payload length, key, check of the header) | payload
 *
 * with three types: PUT (the object), DEL (a remove or an eviction), TOUCH (a get: recency).
 * A put of n objects is one write() and one fdatasync() (option fsync, default on) of the current
 * segment, whatever n is: the cost per object is a memcpy, not a file creation. A segment is
 * closed at seg_bytes (default 64 MiB) and a new one begun.
 *
 * Opening scans the segments in id order and replays the records into the in-memory index and
 * LRU order (PUT and TOUCH make a key most recent, DEL drops it). The scan stops at the first
 * record whose header is damaged or that runs past the end of its file (a write cut by a crash)
 * and truncates the segment there, so a killed writer leaves at most a torn tail, which is never
 * served. Payload integrity is the core's object checksum (a flipped payload byte is a rejected
 * object, removed through a DEL).
 *
 * Space: usage counts the payload bytes of live objects; max_bytes evicts the least recently
 * used (DEL records). Segments are deleted oldest first once none of their objects is live; when
 * the files hold more than twice the live bytes, the live objects of the oldest segment are
 * copied to the head and it is deleted (one segment per put call), so the disk holds at most
 * about 2 x max_bytes + 2 segments. Only the oldest segment is ever deleted, so a DEL record is
 * never lost while the object it removes still exists in an older segment.
 *
 * One process per directory (an flock on <path>/seg/lock; a second opener gets a clear error).
 * Thread safety: puts, removes and the TOUCH records serialise on a write mutex; the index is
 * under its own mutex; object bytes are read with pread outside both.
 */
#ifndef SRT_FILE_SEGMENTS_H
#define SRT_FILE_SEGMENTS_H

#include <stddef.h>
#include <stdint.h>

#include <shadowrt/plugin.h>
#include <shadowrt/tier.h>

struct seg_store;

int seg_open(const struct srt_host *host, const char *root, uint64_t max_bytes, int do_fsync,
	     uint64_t seg_bytes, struct seg_store **out, char *why, size_t why_len);
void seg_close(struct seg_store *s);
int seg_exists(struct seg_store *s, const struct srt_key *keys, uint32_t n, uint32_t *n_present);
int seg_get(struct seg_store *s, const struct srt_key *keys, uint32_t n, void *const *bufs,
	    const size_t *caps, size_t *lens);
int seg_put(struct seg_store *s, const struct srt_key *keys, uint32_t n, const void *const *bufs,
	    const size_t *lens);
int seg_remove(struct seg_store *s, const struct srt_key *keys, uint32_t n);
int seg_usage(struct seg_store *s, uint64_t *bytes, uint64_t *objects);

#endif
