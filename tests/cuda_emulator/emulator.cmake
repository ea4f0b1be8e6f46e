# SPDX-License-Identifier: GPL-3.0-or-later
# The CUDA emulator's core, included from the top-level CMakeLists.txt before
# the engine: the scheduler (emulator.cpp), the runtime (emulated_device.cpp)
# and the stand-ins for cuBLAS(Lt) and cuDNN's handle, as one library with no
# engine dependency; and tb_emulate_cu(), which turns a .cu file into the C++
# the emulator compiles (rewrite_launches.py).
set(TB_EMULATOR_DIR ${CMAKE_CURRENT_LIST_DIR})
find_package(Python3 COMPONENTS Interpreter)

add_library(trainbench_emulator STATIC
  ${TB_EMULATOR_DIR}/emulator.cpp
  ${TB_EMULATOR_DIR}/emulated_device.cpp
  ${TB_EMULATOR_DIR}/emulated_cublas.cpp
  ${TB_EMULATOR_DIR}/emulated_cudnn.cpp)
# The stand-in CUDA headers come before any real ones.
target_include_directories(trainbench_emulator BEFORE PUBLIC ${TB_EMULATOR_DIR}/include)
target_include_directories(trainbench_emulator PUBLIC ${PROJECT_SOURCE_DIR})
target_compile_options(trainbench_emulator PRIVATE -Wall -Wextra -Wno-unused-parameter)
# Boost.Context: the fibers' context switch (emulator.cpp).
find_package(Boost 1.74 REQUIRED COMPONENTS context)
target_link_libraries(trainbench_emulator PUBLIC Threads::Threads PRIVATE Boost::context)

# tb_emulate_cu(<file.cu> <tag> <out-var>): the path of the C++ made from the
# .cu file in this build tree, under emulated/<tag>/ (one copy per target that
# compiles it; compile it with TB_EMULATED_CU_OPTIONS).
function(tb_emulate_cu cu tag out_var)
  if(NOT Python3_Interpreter_FOUND)
    message(FATAL_ERROR "The CUDA emulator rewrites .cu files with Python 3, which was not found")
  endif()
  file(RELATIVE_PATH _rel ${PROJECT_SOURCE_DIR} ${cu})
  set(_out ${PROJECT_BINARY_DIR}/emulated/${tag}/${_rel}.cpp)
  get_filename_component(_dir ${_out} DIRECTORY)
  add_custom_command(OUTPUT ${_out}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${_dir}
    COMMAND Python3::Interpreter ${TB_EMULATOR_DIR}/rewrite_launches.py ${cu} ${_out}
    DEPENDS ${cu} ${TB_EMULATOR_DIR}/rewrite_launches.py
    COMMENT "Emulated CUDA: ${_rel}")
  set(${out_var} ${_out} PARENT_SCOPE)
endfunction()
# __CUDACC__: the rewritten files are CUDA compilations (device code on).
set(TB_EMULATED_CU_OPTIONS -include ${TB_EMULATOR_DIR}/emulator.h -D__CUDACC__
  -Wno-unknown-pragmas -Wno-sign-compare)
