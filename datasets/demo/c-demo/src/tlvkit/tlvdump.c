/* tlvdump FILE: print the records of a TLV1 file.
 * Exit status: 0 ok, 1 invalid input, 64 usage or I/O error. */
#include "tlv.h"

#include <stdio.h>

#define MAX_INPUT 65536
#define MAX_RECORDS 64

int main(int argc, char **argv)
{
    static uint8_t buf[MAX_INPUT];
    struct tlv_record recs[MAX_RECORDS];
    size_t n, count = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: tlvdump FILE\n");
        return 64;
    }
    FILE *f = fopen(argv[1], "rb");
    if (f == NULL) {
        perror(argv[1]);
        return 64;
    }
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);

    int rc = tlv_parse(buf, n, recs, MAX_RECORDS, &count);
    if (rc != TLV_OK) {
        fprintf(stderr, "tlvdump: invalid input: %s\n", tlv_strerror(rc));
        return 1;
    }
    for (size_t i = 0; i < count; i++) {
        printf("type=%u len=%zu value=", recs[i].type, recs[i].len);
        for (size_t j = 0; j < recs[i].len; j++)
            printf("%02x", recs[i].value[j]);
        printf("\n");
    }
    tlv_free(recs, count);
    return 0;
}
