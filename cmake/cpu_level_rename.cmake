# Gives one CPU level's objects their own names (run-time dispatch: src/backend/cpu/isa.h).
#
#   cmake -DNM=nm -DOBJCOPY=objcopy -DSUFFIX=_avx2 -DLIST=objects.txt -DOUT_DIR=dir -P cpu_level_rename.cmake
#
# LIST holds the level's object files (;-separated, as $<TARGET_OBJECTS> gives them). Every symbol
# they define with external linkage (nm --defined-only -g) is renamed NAME -> NAME${SUFFIX} in all of
# them, definitions and references alike (objcopy --redefine-syms), and each object is written to
# OUT_DIR under its own file name. So the level's code keeps calling its own copies, the levels
# link side by side, and no list of names has to be kept by hand: only the functions code outside
# the backend calls go through isa.c (src/backend/cpu/isa_calls.h).
foreach(v NM OBJCOPY SUFFIX LIST OUT_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "cpu_level_rename.cmake: ${v} is not set")
  endif()
endforeach()
file(READ "${LIST}" objects)
string(STRIP "${objects}" objects)
file(MAKE_DIRECTORY "${OUT_DIR}")
execute_process(COMMAND "${NM}" --defined-only -g ${objects}
                OUTPUT_VARIABLE syms RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cpu_level_rename.cmake: ${NM} failed: ${err}")
endif()
string(REPLACE "\n" ";" lines "${syms}")
set(map "")
set(seen "")
foreach(line IN LISTS lines)
  # "0000000000000000 T kn_sgemm" (file headers "x.c.o:" and blank lines have no symbol)
  if(line MATCHES "^[0-9a-fA-F]* *[A-Za-z] ([A-Za-z_.$][A-Za-z0-9_.$]*)$")
    set(s "${CMAKE_MATCH_1}")
    list(FIND seen "${s}" at)
    if(at EQUAL -1)
      list(APPEND seen "${s}")
      string(APPEND map "${s} ${s}${SUFFIX}\n")
    endif()
  endif()
endforeach()
file(WRITE "${OUT_DIR}/renames.txt" "${map}")
foreach(obj IN LISTS objects)
  get_filename_component(name "${obj}" NAME)
  execute_process(COMMAND "${OBJCOPY}" --redefine-syms=${OUT_DIR}/renames.txt "${obj}" "${OUT_DIR}/${name}.tmp"
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cpu_level_rename.cmake: ${OBJCOPY} ${obj} failed: ${err}")
  endif()
  file(RENAME "${OUT_DIR}/${name}.tmp" "${OUT_DIR}/${name}")
endforeach()
