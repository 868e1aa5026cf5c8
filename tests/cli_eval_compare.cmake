# Runs `attn eval` on fixtures/<CASE>.safetensors (or, if that case is absent, on the first
# case of fixtures/MANIFEST.txt) and compares the output with the expected file.
#   cmake -DATTN=attn -DCOMPARE=test_fixtures -DCASE=name -DOUT=out.safetensors -P this
# Run from tests/.
if(NOT EXISTS "fixtures/${CASE}.safetensors")
  if(NOT EXISTS "fixtures/MANIFEST.txt")
    message(FATAL_ERROR "fixtures/MANIFEST.txt not found (run from tests/)")
  endif()
  file(STRINGS "fixtures/MANIFEST.txt" cases LIMIT_COUNT 1)
  if(NOT cases)
    message(FATAL_ERROR "fixtures/MANIFEST.txt lists no cases")
  endif()
  list(GET cases 0 CASE)
endif()
file(REMOVE "${OUT}")
execute_process(COMMAND "${ATTN}" eval "fixtures/${CASE}.safetensors" -o "${OUT}" --threads 3
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "attn eval fixtures/${CASE}.safetensors failed (${rc})")
endif()
execute_process(COMMAND "${COMPARE}" --compare "${OUT}" "fixtures/${CASE}.expected.safetensors"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "output of attn eval differs from fixtures/${CASE}.expected.safetensors")
endif()
