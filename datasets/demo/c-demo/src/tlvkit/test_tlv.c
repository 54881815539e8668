/* Unit tests for tlvkit; `make test` builds and runs them. */
#include "tlv.h"

#include <stdio.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                      \
    do {                                                                 \
        if (!(cond)) {                                                   \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,       \
                    __LINE__, #cond);                                    \
            failures++;                                                  \
        }                                                                \
    } while (0)

static void test_two_records(void)
{
    const uint8_t in[] = "TLV1\x01\x00\x03" "abc" "\x02\x00\x00";
    struct tlv_record r[4];
    size_t count = 0;

    CHECK(tlv_parse(in, sizeof in - 1, r, 4, &count) == TLV_OK);
    CHECK(count == 2);
    CHECK(r[0].type == 1 && r[0].len == 3 && memcmp(r[0].value, "abc", 3) == 0);
    CHECK(r[1].type == 2 && r[1].len == 0);
    tlv_free(r, count);
}

static void test_bad_magic(void)
{
    struct tlv_record r[1];
    size_t count = 0;

    CHECK(tlv_parse((const uint8_t *)"TLV2", 4, r, 1, &count) == TLV_ERR_MAGIC);
    CHECK(tlv_parse((const uint8_t *)"TL", 2, r, 1, &count) == TLV_ERR_MAGIC);
}

static void test_truncated(void)
{
    const uint8_t header_cut[] = "TLV1\x01\x00";
    const uint8_t value_cut[] = "TLV1\x01\x00\x05" "ab";
    struct tlv_record r[2];
    size_t count = 0;

    CHECK(tlv_parse(header_cut, sizeof header_cut - 1, r, 2, &count) == TLV_ERR_TRUNCATED);
    CHECK(tlv_parse(value_cut, sizeof value_cut - 1, r, 2, &count) == TLV_ERR_TRUNCATED);
}

static void test_too_many(void)
{
    const uint8_t in[] = "TLV1\x01\x00\x01x\x01\x00\x01y";
    struct tlv_record r[1];
    size_t count = 0;

    CHECK(tlv_parse(in, sizeof in - 1, r, 1, &count) == TLV_ERR_TOO_MANY);
}

int main(void)
{
    test_two_records();
    test_bad_magic();
    test_truncated();
    test_too_many();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("all tlvkit tests passed\n");
    return 0;
}
