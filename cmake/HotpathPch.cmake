# One precompiled header for the LibTorch translation units (issue 25 item 7). Parsing <ATen/ATen.h> costs
# ~11 s and <torch/nn/module.h> ~14 s of a 2-core machine's CPU per translation unit, most of each unit's
# compile time; loaded from a precompiled header they cost ~1 s. docs/ci.md has the build times before and after.
#
# GCC refuses a PCH built with other flags that change predefined macros (-fPIC vs -fPIE; -Wpedantic, which
# undefines __cpp_runtime_arrays), so the PCH targets take hotpath_warnings like every consumer, and there are two: one for
# libraries (-fPIC) and one for executables (-fPIE), each built once (hotpath_pch_lib, hotpath_pch_exe) and reused
# by every target through hotpath_use_pch(). A unit compiled with other flags (-fopenmp, a -m ISA flag) keeps
# the header text: mark it SKIP_PRECOMPILE_HEADERS. With ccache (scripts/build), CCACHE_SLOPPINESS must hold
# pch_defines,time_macros: ccache then caches the .gch itself, and a fresh clone hits as it did without a PCH.
option(HOTPATH_PCH "hotpath: one precompiled header for the LibTorch headers (GCC)" ON)
if(NOT HOTPATH_PCH OR NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU" OR HOTPATH_FUZZ OR HOTPATH_SANITIZE)
  function(hotpath_use_pch)
  endfunction()
  return()
endif()

set(_hp_pch_headers
  <ATen/ATen.h>
  <ATen/Parallel.h>
  <torch/nn/module.h>
  <torch/nn/modules/linear.h>
  <torch/nn/modules/conv.h>
  <torch/nn/modules/batchnorm.h>
  <torch/nn/modules/container/sequential.h>
  <torch/optim/optimizer.h>
  <nlohmann/json.hpp>)
file(WRITE "${CMAKE_BINARY_DIR}/hotpath_pch_anchor.cpp" "// The translation unit that builds the precompiled header.\n")
add_library(hotpath_pch_lib OBJECT "${CMAKE_BINARY_DIR}/hotpath_pch_anchor.cpp")
target_link_libraries(hotpath_pch_lib PRIVATE hotpath::torch nlohmann_json::nlohmann_json hotpath_warnings)
target_precompile_headers(hotpath_pch_lib PRIVATE ${_hp_pch_headers})
add_library(hotpath_pch_exe OBJECT "${CMAKE_BINARY_DIR}/hotpath_pch_anchor.cpp")
set_target_properties(hotpath_pch_exe PROPERTIES POSITION_INDEPENDENT_CODE OFF)
target_compile_options(hotpath_pch_exe PRIVATE -fPIE)
target_link_libraries(hotpath_pch_exe PRIVATE hotpath::torch nlohmann_json::nlohmann_json hotpath_warnings)
target_precompile_headers(hotpath_pch_exe PRIVATE ${_hp_pch_headers})

# hotpath_use_pch(target...): each target reuses the precompiled header that matches its kind.
function(hotpath_use_pch)
  foreach(t IN LISTS ARGN)
    get_target_property(_type ${t} TYPE)
    if(_type STREQUAL "EXECUTABLE")
      target_precompile_headers(${t} REUSE_FROM hotpath_pch_exe)
    else()
      target_precompile_headers(${t} REUSE_FROM hotpath_pch_lib)
    endif()
  endforeach()
endfunction()
