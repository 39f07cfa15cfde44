# Warnings (as errors) and sanitizers as INTERFACE targets, linked PRIVATE by our own targets only,
# so third-party headers (included as SYSTEM) never trip -Werror.
add_library(posbias_warnings INTERFACE)
add_library(posbias::warnings ALIAS posbias_warnings)
target_compile_options(posbias_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Wunused -Woverloaded-virtual -Wimplicit-fallthrough -Werror
  # GCC 12 reports std::string copies at -O3 as overlapping memcpy (GCC bug 105329): a false alarm.
  $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>)

add_library(posbias_sanitizers INTERFACE)
add_library(posbias::sanitizers ALIAS posbias_sanitizers)
if(POSBIAS_SANITIZE)
  target_compile_options(posbias_sanitizers INTERFACE -fsanitize=${POSBIAS_SANITIZE} -fno-omit-frame-pointer)
  target_link_options(posbias_sanitizers INTERFACE -fsanitize=${POSBIAS_SANITIZE})
  # Sanitized binaries link the runtime globally, so every target (third-party included) gets it.
  add_compile_options(-fsanitize=${POSBIAS_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${POSBIAS_SANITIZE})
  # GCC 12's -Wmaybe-uninitialized misfires on std::variant<..., std::string> under
  # -fsanitize=thread at -O2; the same code is clean in the release and ASan builds.
  if(POSBIAS_SANITIZE MATCHES "thread")
    target_compile_options(posbias_warnings INTERFACE $<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>)
  endif()
endif()

# posbias_room(NAME SOURCES... [DEPS ...]): one library per room, with a namespaced alias.
function(posbias_room name)
  cmake_parse_arguments(ROOM "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(posbias_${name} STATIC ${ROOM_SOURCES})
  add_library(posbias::${name} ALIAS posbias_${name})
  target_include_directories(posbias_${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(posbias_${name} PUBLIC ${ROOM_PUBLIC_DEPS}
                        PRIVATE ${ROOM_PRIVATE_DEPS} posbias::warnings posbias::sanitizers)
endfunction()
