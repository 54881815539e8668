#include "tlv.h"

#include <stdlib.h>
#include <string.h>

int tlv_parse(const uint8_t *buf, size_t n, struct tlv_record *out, size_t max,
              size_t *count)
{
    size_t pos = 4, k = 0;

    if (n < 4 || memcmp(buf, "TLV1", 4) != 0)
        return TLV_ERR_MAGIC;
    while (pos < n) {
        if (k == max) {
            tlv_free(out, k);
            return TLV_ERR_TOO_MANY;
        }
        if (n - pos < 3) {
            tlv_free(out, k);
            return TLV_ERR_TRUNCATED;
        }
        size_t len = ((size_t)buf[pos + 1] << 8) | buf[pos + 2];
        pos += 3;
        if (n - pos < len) {
            tlv_free(out, k);
            return TLV_ERR_TRUNCATED;
        }
        out[k].type = buf[pos - 3];
        out[k].len = len;
        out[k].value = malloc(TLV_VALUE_MAX);
        if (out[k].value == NULL) {
            tlv_free(out, k);
            return TLV_ERR_NOMEM;
        }
        memcpy(out[k].value, buf + pos, len);
        pos += len;
        k++;
    }
    *count = k;
    return TLV_OK;
}

void tlv_free(struct tlv_record *recs, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        free(recs[i].value);
        recs[i].value = NULL;
    }
}

const char *tlv_strerror(int err)
{
    switch (err) {
    case TLV_OK: return "ok";
    case TLV_ERR_MAGIC: return "bad magic";
    case TLV_ERR_TRUNCATED: return "truncated record";
    case TLV_ERR_TOO_MANY: return "too many records";
    case TLV_ERR_NOMEM: return "out of memory";
    default: return "invalid input";
    }
}
