# The python of the project venv (scripts/setup makes it): LibTorch's wheel lives there, and the
# tests and benchmarks use it to run the python peers (PIL, torchvision, webdataset).
set(HOTPATH_PYTHON "" CACHE FILEPATH "hotpath: python of the venv made by scripts/setup")
if(NOT HOTPATH_PYTHON)
  if(DEFINED ENV{HOTPATH_PYTHON})
    set(HOTPATH_PYTHON "$ENV{HOTPATH_PYTHON}" CACHE FILEPATH "" FORCE)
  elseif(EXISTS "$ENV{HOME}/.cache/hotpath/venv/bin/python")
    set(HOTPATH_PYTHON "$ENV{HOME}/.cache/hotpath/venv/bin/python" CACHE FILEPATH "" FORCE)
  endif()
endif()
if(NOT HOTPATH_PYTHON)
  message(FATAL_ERROR "hotpath: no venv python found; run scripts/setup or pass -DHOTPATH_PYTHON=...")
endif()
