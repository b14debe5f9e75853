/* Drop-in NCCL header: programs written for NCCL include this and link -ltutti. */
#ifndef NCCL_H_
#define NCCL_H_
#include "tutti.h"
#endif
