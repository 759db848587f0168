#!/usr/bin/env python3
"""Where a run's time goes, from a perf profile of `kiln bench`: each sample is put in one bucket by
the frames below the innermost executor call (run_node), e.g. shape inference (the ops' infer
functions), output tensors (headers, allocation, freeing), message formatting, attribute lookups,
the kernels, the executor itself. A rough split (inlining moves some samples), used for
bench/results/run-overhead-2026-12-02.md:

    perf record -F 2000 --call-graph dwarf,16384 -o run.data \
        kiln bench MODEL --opt-level 0 --threads 1 --duration 2 --warmup 100
    bench/run_profile_split.py run.data
"""
import collections
import re
import subprocess
import sys


def classify(stack):
    # stack: list of symbol names, leaf first
    if 'run_node' not in stack:
        if 'exec_graph' in stack: return 'executor: per-run setup (exec_graph)'
        if any(s.startswith('kiln_session_run') or s in ('run_body','run_common.part.0','run_common') for s in stack): return 'session call (binding, outputs)'
        return None  # bench harness, creation, other threads
    i = stack.index('run_node')
    below = stack[:i]
    if not below: return 'executor: run_node itself'
    names = below[::-1]  # from run_node's child down to leaf
    first = names[0]
    def has(p): return any(re.search(p, n) for n in names)
    if has(r'^(infer_|kn_infer_|kn_broadcast_types|kn_ti_|kn_type_init|kn_type_set_tensor)') and not has(r'^(cpu_run|kn_cpu_)'): return 'shape inference (infer functions)'
    if first == 'memo_node_static' or first=='memo_node_done': return 'shape memo recording'
    if has(r'snprintf|vfprintf|printf'): return 'message formatting (snprintf)'
    if has(r'^kn_attr_|^kn_node_attr'): return 'attribute lookup (kn_attr_*)'
    if has(r'kn_exec_is_view|take_as_view') : return 'view check / take_as_view'
    if has(r'^(cpu_run|kn_cpu_|run_matmul|kn_sgemm)') or (first not in ('kn_tensor_new_view','kn_tensor_free','__libc_calloc','malloc','cfree@GLIBC_2.2.5','_int_free','__GI___libc_free','kn_type_of_tensor','kn_tensor_new_pooled','arena_output','release','free_owned','kn_profile_on','kn_dtype_nbytes','kn_shape_count','kn_type_is_static','__memset_avx512_unaligned_erms','__strcmp_evex','kn_run_ctx_stopping','kiln_dtype_size','check_shape','kn_tensor_count') and not first.startswith('_') and 'free' not in first and 'alloc' not in first):
        return 'kernels'
    if has(r'kn_type_of_tensor'): return 'shape inference (input types)'
    if has(r'kn_tensor_new_view|calloc|malloc|free|kn_tensor_new_pooled|check_shape|arena_output'): return 'executor: output tensors (headers, alloc/free)'
    if has(r'strcmp'): return 'view check / take_as_view'
    return 'executor: run_node itself'


def main(path):
    out = subprocess.run(['perf','script','-i',path,'-F','comm,ip,sym'], capture_output=True, text=True).stdout
    counts = collections.Counter(); stack=[]; total=0
    for line in out.split('\n')+['']:
        if not line.strip():
            if stack:
                c = classify(stack)
                if c: counts[c]+=1; total+=1
            stack=[]; continue
        if line and not line[0].isspace(): continue
        parts=line.split()
        if len(parts)>=2: stack.append(parts[1].split('+')[0])
        elif parts: stack.append(parts[0])
    for k,v in counts.most_common(): print(f"  {100*v/total:5.1f}%  {k}")

if __name__ == "__main__":
    main(sys.argv[1])
