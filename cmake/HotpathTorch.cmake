# LibTorch from the pinned PyPI `torch` wheel in the project venv.
#
# We do not call find_package(Torch): the wheel is the CUDA build and its TorchConfig.cmake
# runs find_package(CUDA/CUDAToolkit) and checks nvcc/cuDNN versions against the local CUDA
# toolkit (13.x here), which differs from the toolkit the wheel was built with. hotpath needs
# none of that to compile C++ against LibTorch, so this file builds the imported target from
# the wheel's own layout (include/, lib/) and asks the wheel's python for its C++ ABI flag.
#
# Result: INTERFACE target `hotpath::torch`. With HOTPATH_TORCH_CUDA=ON (default when the
# wheel ships libtorch_cuda.so) the CUDA backend library is linked with --no-as-needed so
# CUDA devices and pinned memory are available at run time when a GPU is present.

# HOTPATH_TORCH_HEADERS_ONLY=<unpacked wheel>/torch: compile against another LibTorch release's headers (no link;
# scripts/compile-against-torch, the GPU machine's torch 2.11 checked here). Its version comes from version.py.
set(HOTPATH_TORCH_HEADERS_ONLY "" CACHE PATH "hotpath: torch/ folder of another release's headers (compile checks only)")
if(HOTPATH_TORCH_HEADERS_ONLY)
  set(HOTPATH_TORCH_DIR "${HOTPATH_TORCH_HEADERS_ONLY}")
  file(STRINGS "${HOTPATH_TORCH_DIR}/version.py" _hp_torch_version_line REGEX "^__version__")
  string(REGEX REPLACE "^__version__ *= *'([^']*)'.*" "\\1" HOTPATH_TORCH_VERSION "${_hp_torch_version_line}")
  set(_hp_torch_abi 1)  # every wheel since 2.7 is built with the new ABI
else()
  execute_process(
    COMMAND "${HOTPATH_PYTHON}" -c
      "import os, torch; print(os.path.dirname(torch.__file__)); print(int(torch.compiled_with_cxx11_abi())); print(torch.__version__)"
    OUTPUT_VARIABLE _hp_torch_out
    RESULT_VARIABLE _hp_torch_rc
    ERROR_VARIABLE _hp_torch_err
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _hp_torch_rc EQUAL 0)
    message(FATAL_ERROR "hotpath: `${HOTPATH_PYTHON} -c 'import torch'` failed: ${_hp_torch_err}")
  endif()
  string(REPLACE "\n" ";" _hp_torch_out "${_hp_torch_out}")
  list(GET _hp_torch_out 0 HOTPATH_TORCH_DIR)
  list(GET _hp_torch_out 1 _hp_torch_abi)
  list(GET _hp_torch_out 2 HOTPATH_TORCH_VERSION)
endif()
message(STATUS "hotpath: LibTorch ${HOTPATH_TORCH_VERSION} from ${HOTPATH_TORCH_DIR} (cxx11 abi ${_hp_torch_abi})")

set(_hp_torch_lib "${HOTPATH_TORCH_DIR}/lib")
set(_hp_has_cuda OFF)
if(EXISTS "${_hp_torch_lib}/libtorch_cuda.so")
  set(_hp_has_cuda ON)
endif()
option(HOTPATH_TORCH_CUDA "hotpath: link LibTorch's CUDA backend (needs libtorch_cuda.so in the wheel)" ${_hp_has_cuda})

add_library(hotpath_torch INTERFACE)
add_library(hotpath::torch ALIAS hotpath_torch)
target_include_directories(hotpath_torch SYSTEM INTERFACE
  "${HOTPATH_TORCH_DIR}/include"
  "${HOTPATH_TORCH_DIR}/include/torch/csrc/api/include")
target_compile_definitions(hotpath_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${_hp_torch_abi})
set(_hp_torch_libs "${_hp_torch_lib}/libtorch.so" "${_hp_torch_lib}/libtorch_cpu.so" "${_hp_torch_lib}/libc10.so")
if(HOTPATH_TORCH_CUDA)
  target_link_libraries(hotpath_torch INTERFACE
    "-Wl,--no-as-needed" "${_hp_torch_lib}/libtorch_cuda.so" "${_hp_torch_lib}/libc10_cuda.so" "-Wl,--as-needed")
  target_compile_definitions(hotpath_torch INTERFACE HOTPATH_TORCH_CUDA=1)
endif()
target_link_libraries(hotpath_torch INTERFACE ${_hp_torch_libs})
# libstdc++ first in every binary's DT_NEEDED, ahead of LibTorch. The torch wheels export a statically linked copy of
# libstdc++'s std::filesystem (libtorch_cpu.so in 2.15, libtorch.so in 2.11) and ELF lookup binds a call to the first
# library in load order that defines the symbol, so hotpath's std::filesystem calls ran torch's copy. In torch 2.11
# that copy's remove_all jumps to address 0: every CUDA trainer test, every CUDA loader test (at its temporary
# folder's removal) and `bench train` / `bench text` (at exit) died with SIGSEGV on the GPU machine (issue 24;
# tests/train/link_order_test.cpp shows the binding on any machine).
# One linker argument (the driver cannot move its parts). hotpath no longer calls remove_all (core/remove_tree.h),
# so this order is the second line of defence; LinkOrder.* (also in cuda_tests, so a GPU run reports it) checks it.
#
# Then libtorch_cpu.so, ahead of Debian's libdnnl.so.2 (ops/onednn_conv.h). Both oneDNNs define the std::call_once
# thunks of their GEMM kernels' jit_init() with vague linkage, and each library's call_once stores the address of
# the first definition in load order. With libdnnl first, LibTorch's call_once ran Debian's initialiser, LibTorch's
# own kernel table stayed empty, and every at::_int_mm took oneDNN's reference GEMM (ref_gemm<double>): BERT-base
# int8 at batch 1 went from ~30 ms to ~2 s. With LibTorch first, Debian's GEMM-based convs are the ones without
# kernels, and OneDnnConv never picks those. LinkOrder.* and cli.link_order check both orders' outcome.
target_link_options(hotpath_torch INTERFACE
  "LINKER:--push-state,--no-as-needed,-lstdc++,${_hp_torch_lib}/libtorch_cpu.so,--pop-state")
# The wheel's libraries find their own dependencies (nvidia-* wheels) through their RPATH;
# ours only has to find the wheel's lib/ folder.
set(CMAKE_BUILD_RPATH "${CMAKE_BUILD_RPATH};${_hp_torch_lib}")
set(CMAKE_INSTALL_RPATH "${CMAKE_INSTALL_RPATH};${_hp_torch_lib}")

# HOTPATH_CUDART_INCLUDE_DIR: ONE folder of complete CUDA runtime headers, for the two places that include them
# (nvjpeg.h in the loader, ProcessGroupNCCL.hpp in nccl_backend.cpp). Complete means cuda_runtime_api.h AND the
# crt/ folder it includes: the torch wheel's nvidia/cu13/include on the GPU machine has the first without the
# second, which cost a GPU run (../shared/gpu-run-1). The toolkit's /usr/local/cuda/include comes first where it
# exists, then LibTorch's own nvidia wheels; a partial set is never chosen, and a folder given with -D that is
# partial stops the configure with what is missing.
if(HOTPATH_TORCH_CUDA)
  set(_hp_cudart_candidates /usr/local/cuda/include "${HOTPATH_TORCH_DIR}/../nvidia/cu13/include"
      "${HOTPATH_TORCH_DIR}/../nvidia/cuda_runtime/include")
  if(HOTPATH_CUDART_INCLUDE_DIR)
    if(NOT EXISTS "${HOTPATH_CUDART_INCLUDE_DIR}/cuda_runtime_api.h" OR
       NOT EXISTS "${HOTPATH_CUDART_INCLUDE_DIR}/crt/host_defines.h")
      message(FATAL_ERROR "hotpath: HOTPATH_CUDART_INCLUDE_DIR=${HOTPATH_CUDART_INCLUDE_DIR} is not a complete set of "
        "CUDA runtime headers (expected cuda_runtime_api.h and crt/host_defines.h in it)")
    endif()
  else()
    foreach(_hp_dir IN LISTS _hp_cudart_candidates)
      if(EXISTS "${_hp_dir}/cuda_runtime_api.h" AND EXISTS "${_hp_dir}/crt/host_defines.h")
        get_filename_component(_hp_dir "${_hp_dir}" REALPATH)
        set(HOTPATH_CUDART_INCLUDE_DIR "${_hp_dir}" CACHE PATH
          "hotpath: folder of the complete CUDA runtime headers (cuda_runtime_api.h and crt/)")
        break()
      endif()
    endforeach()
  endif()
  if(HOTPATH_CUDART_INCLUDE_DIR)
    message(STATUS "hotpath: CUDA runtime headers from ${HOTPATH_CUDART_INCLUDE_DIR}")
  else()
    message(STATUS "hotpath: no complete CUDA runtime headers (cuda_runtime_api.h with crt/) in: "
      "${_hp_cudart_candidates}: decode nvjpeg and NCCL are left out")
  endif()
endif()
