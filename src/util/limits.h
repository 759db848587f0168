/* Bounds on sizes a model's attributes and constants ask for, checked before allocating. */
#ifndef KN_LIMITS_H
#define KN_LIMITS_H

#include <stdint.h>

/* The most bytes one tensor sized by a model's attributes or constants may take:
 * $KILN_MAX_TENSOR_BYTES (bytes, or with a K/M/G suffix) when set, else the machine's physical
 * memory (a tensor larger than that cannot be computed here anyway, and asking for it is the mark
 * of a hostile or broken model: a 300-byte TfIdfVectorizer asked for 7 GB). */
uint64_t kn_tensor_bytes_limit(void);
/* Reads the limit now and has kn_tensor_bytes_limit return it on this thread until unpinned: a run
 * pins it for its duration (the environment is read once per run instead of at each of its
 * allocations). Pins nest: each pin needs its unpin. */
void kn_tensor_bytes_limit_pin(void);
/* The same with a limit read before (a session's, read as it was made): no look at the
 * environment on the run's path */
void kn_tensor_bytes_limit_pin_to(uint64_t limit);
void kn_tensor_bytes_limit_unpin(void);
/* count * elem_size, or UINT64_MAX when it overflows. */
uint64_t kn_bytes_of(uint64_t count, uint64_t elem_size);

#endif
