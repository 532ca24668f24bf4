/*
 * trampolines.S - exported trampolines for every symbol of FGPU_FORWARD_LIST
 * (forward_list.h unless told otherwise); see forward.h.  x86-64 (System V)
 * and AArch64 (AAPCS64).
 */
#ifndef FGPU_FORWARD_LIST
#define FGPU_FORWARD_LIST "forward_list.h"
#endif

#if defined(__x86_64__)

        .macro FWD name
        .text
        .globl \name
        .type \name, @function
        .p2align 4
\name:
        jmp *fgpu_fp_\name(%rip)
        .size \name, . - \name
fgpu_lazy_\name:
        leaq fgpu_fp_\name(%rip), %r11
        jmp fgpu_fwd_lazy_common
        .data
        .p2align 3
        .globl fgpu_fp_\name
        .hidden fgpu_fp_\name
        .type fgpu_fp_\name, @object
        .size fgpu_fp_\name, 8
fgpu_fp_\name:
        .quad fgpu_lazy_\name
        .endm

        .text
        .p2align 4
        .type fgpu_fwd_lazy_common, @function
/* r11 = address of the pointer to resolve; every argument register is live. */
fgpu_fwd_lazy_common:
        pushq %rbp
        movq %rsp, %rbp
        subq $192, %rsp
        movq %rdi, 0(%rsp)
        movq %rsi, 8(%rsp)
        movq %rdx, 16(%rsp)
        movq %rcx, 24(%rsp)
        movq %r8, 32(%rsp)
        movq %r9, 40(%rsp)
        movq %rax, 48(%rsp)
        movdqa %xmm0, 64(%rsp)
        movdqa %xmm1, 80(%rsp)
        movdqa %xmm2, 96(%rsp)
        movdqa %xmm3, 112(%rsp)
        movdqa %xmm4, 128(%rsp)
        movdqa %xmm5, 144(%rsp)
        movdqa %xmm6, 160(%rsp)
        movdqa %xmm7, 176(%rsp)
        movq %r11, %rdi
        call fgpu_fwd_lazy
        movq %rax, %r11
        movq 0(%rsp), %rdi
        movq 8(%rsp), %rsi
        movq 16(%rsp), %rdx
        movq 24(%rsp), %rcx
        movq 32(%rsp), %r8
        movq 40(%rsp), %r9
        movq 48(%rsp), %rax
        movdqa 64(%rsp), %xmm0
        movdqa 80(%rsp), %xmm1
        movdqa 96(%rsp), %xmm2
        movdqa 112(%rsp), %xmm3
        movdqa 128(%rsp), %xmm4
        movdqa 144(%rsp), %xmm5
        movdqa 160(%rsp), %xmm6
        movdqa 176(%rsp), %xmm7
        leave
        jmp *%r11
        .size fgpu_fwd_lazy_common, . - fgpu_fwd_lazy_common

#define FGPU_FWD(name) FWD name
#include FGPU_FORWARD_LIST

        .section .note.GNU-stack, "", @progbits

#elif defined(__aarch64__)

        .macro FWD name
        .text
        .globl \name
        .type \name, %function
        .p2align 4
\name:
        adrp x16, fgpu_fp_\name
        ldr x16, [x16, #:lo12:fgpu_fp_\name]
        br x16
        .size \name, . - \name
fgpu_lazy_\name:
        adrp x17, fgpu_fp_\name
        add x17, x17, #:lo12:fgpu_fp_\name
        b fgpu_fwd_lazy_common
        .data
        .p2align 3
        .globl fgpu_fp_\name
        .hidden fgpu_fp_\name
        .type fgpu_fp_\name, %object
        .size fgpu_fp_\name, 8
fgpu_fp_\name:
        .xword fgpu_lazy_\name
        .endm

        .text
        .p2align 4
        .type fgpu_fwd_lazy_common, %function
/* x17 = address of the pointer to resolve; x0-x8 and q0-q7 are live. */
fgpu_fwd_lazy_common:
        stp x29, x30, [sp, #-224]!
        mov x29, sp
        stp x0, x1, [sp, #16]
        stp x2, x3, [sp, #32]
        stp x4, x5, [sp, #48]
        stp x6, x7, [sp, #64]
        str x8, [sp, #80]
        stp q0, q1, [sp, #96]
        stp q2, q3, [sp, #128]
        stp q4, q5, [sp, #160]
        stp q6, q7, [sp, #192]
        mov x0, x17
        bl fgpu_fwd_lazy
        mov x16, x0
        ldp x0, x1, [sp, #16]
        ldp x2, x3, [sp, #32]
        ldp x4, x5, [sp, #48]
        ldp x6, x7, [sp, #64]
        ldr x8, [sp, #80]
        ldp q0, q1, [sp, #96]
        ldp q2, q3, [sp, #128]
        ldp q4, q5, [sp, #160]
        ldp q6, q7, [sp, #192]
        ldp x29, x30, [sp], #224
        br x16
        .size fgpu_fwd_lazy_common, . - fgpu_fwd_lazy_common

#define FGPU_FWD(name) FWD name
#include FGPU_FORWARD_LIST

        .section .note.GNU-stack, "", %progbits

#else
#error "trampolines.S supports x86-64 and AArch64 only"
#endif
