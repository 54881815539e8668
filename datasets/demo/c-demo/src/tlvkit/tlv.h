/* tlvkit: a tiny reader for "TLV1" type-length-value files.
 *
 * File layout: the 4 bytes "TLV1", then records, each
 *   type (1 byte) | length (2 bytes, big-endian) | value (length bytes)
 */
#ifndef TLVKIT_TLV_H
#define TLVKIT_TLV_H

#include <stddef.h>
#include <stdint.h>

#define TLV_VALUE_MAX 32 /* largest value a record may carry */

enum {
    TLV_OK = 0,
    TLV_ERR_MAGIC = -1,     /* missing "TLV1" header */
    TLV_ERR_TRUNCATED = -2, /* a record runs past the end of the input */
    TLV_ERR_TOO_MANY = -3,  /* more records than the caller has room for */
    TLV_ERR_NOMEM = -4,
};

struct tlv_record {
    uint8_t type;
    size_t len;
    uint8_t *value; /* heap buffer of TLV_VALUE_MAX bytes */
};

/* Parse buf[0..n) into out[0..max). On success returns TLV_OK and sets
 * *count; on malformed input returns a negative TLV_ERR_* code and leaves
 * nothing allocated. */
int tlv_parse(const uint8_t *buf, size_t n, struct tlv_record *out, size_t max,
              size_t *count);
void tlv_free(struct tlv_record *recs, size_t count);
const char *tlv_strerror(int err);

#endif
