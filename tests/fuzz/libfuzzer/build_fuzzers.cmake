# CTest fixture fuzz.build: configures (or refreshes) the clang tree of the libFuzzer harnesses
# and builds only them (target posbias_fuzzers) and the rooms they link.
#   cmake -DSOURCE_DIR=... -DBUILD_DIR=... -DCLANGXX=clang++ -DGENERATOR=Ninja [-DMAKE_PROGRAM=...]
#         [-DPREFIX_PATH=...] [-DJOBS=2] -P build_fuzzers.cmake
# -O1 with line tables: what libFuzzer recommends, and the cheapest build that still symbolizes.
foreach(required SOURCE_DIR BUILD_DIR CLANGXX GENERATOR)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "build_fuzzers.cmake: -D${required}= is required")
  endif()
endforeach()
if(NOT JOBS)
  set(JOBS 2)
endif()
set(configure ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BUILD_DIR} -G ${GENERATOR}
  -DCMAKE_CXX_COMPILER=${CLANGXX} -DCMAKE_BUILD_TYPE=RelWithDebInfo
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG"
  -DPOSBIAS_FUZZ=ON -DPOSBIAS_BUILD_BENCH=OFF -DPOSBIAS_BUILD_TESTS=ON -DCMAKE_EXPORT_COMPILE_COMMANDS=OFF)
if(MAKE_PROGRAM)
  list(APPEND configure -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
if(PREFIX_PATH)
  list(APPEND configure "-DCMAKE_PREFIX_PATH=${PREFIX_PATH}")
endif()
string(TIMESTAMP started "%s")
execute_process(COMMAND ${configure} OUTPUT_FILE ${BUILD_DIR}-configure.log ERROR_FILE ${BUILD_DIR}-configure.log
  RESULT_VARIABLE configured)
if(NOT configured EQUAL 0)
  file(READ ${BUILD_DIR}-configure.log log)
  message(FATAL_ERROR "configuring the clang fuzz tree failed:\n${log}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target posbias_fuzzers -j ${JOBS}
  RESULT_VARIABLE built)
if(NOT built EQUAL 0)
  message(FATAL_ERROR "building the libFuzzer harnesses failed (see above)")
endif()
string(TIMESTAMP finished "%s")
math(EXPR seconds "${finished} - ${started}")
message(STATUS "clang fuzz tree ${BUILD_DIR} configured and built in ${seconds} s")
