/* What a hostile session runs against the storage service: it swaps pairs of names in
 * its folder, a directory and a link to somewhere else, atomically and as fast as it
 * can (renameat2 RENAME_EXCHANGE), until a file named by STOP appears; then it prints
 * how many swaps it made. Built static, so it runs in any image.
 *
 *   swap STOP A1 B1 [A2 B2 ...]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

int main(int argc, char **argv) {
    if (argc < 4 || argc % 2) {
        fprintf(stderr, "usage: swap STOP A B [A B ...]\n");
        return 2;
    }
    unsigned long swaps = 0;
    for (;;) {
        for (int i = 2; i < argc; i += 2) {
            if (syscall(SYS_renameat2, AT_FDCWD, argv[i], AT_FDCWD, argv[i + 1],
                        RENAME_EXCHANGE) != 0) {
                perror("renameat2");
                return 1;
            }
            swaps++;
        }
        if (swaps % 4096 < (unsigned long)(argc - 2) / 2 && access(argv[1], F_OK) == 0)
            break;
    }
    printf("%lu swaps\n", swaps);
    return 0;
}
