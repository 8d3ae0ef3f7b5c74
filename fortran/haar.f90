!> haar: the Fortran face of libhaar (haar.h), over iso_c_binding.
!>
!> Every wrapper takes Fortran strings (trailing blanks ignored) and returns an integer
!> status: HAAR_OK (0) on success, else one of the HAAR_ERR_* codes, with the message in
!> haar_error_message(). A store is a type(haar_store); open it with haar_open (a
!> configuration file, or the environment's when the path is absent) or haar_open_yaml,
!> close it with haar_close. Fields are keyed by text, "class=od,expver=1,...".
!>
!> Build: gfortran -c haar.f90, link with -lhaar (or the cargo target's -lhaar_c).
module haar
  use, intrinsic :: iso_c_binding
  implicit none
  private

  integer, parameter, public :: HAAR_OK = 0, HAAR_END = 1, HAAR_ERR_INPUT = 2, &
       HAAR_ERR_MISSING = 3, HAAR_ERR_STORAGE = 4, HAAR_ERR_INTERNAL = 5, HAAR_ERR_TIMEOUT = 6

  !> An open store (a C haar_t*).
  type, public :: haar_store
     type(c_ptr) :: ptr = c_null_ptr
  end type haar_store

  !> A failure found by this module itself (e.g. a buffer too small), reported by
  !> haar_error_message() until the next call of a wrapper.
  character(len=:), allocatable :: local_error

  public :: haar_open, haar_open_yaml, haar_close, haar_flush, haar_archive_real32, &
       haar_archive_real64, haar_archive_grib, haar_retrieve_real32, haar_retrieve_real64, &
       haar_list_count, haar_wait, haar_error_message, haar_version

  interface
     integer(c_int) function c_haar_open(path, out) bind(C, name="haar_open")
       import :: c_int, c_ptr
       type(c_ptr), value :: path
       type(c_ptr), intent(out) :: out
     end function c_haar_open
     integer(c_int) function c_haar_open_yaml(yaml, out) bind(C, name="haar_open_yaml")
       import :: c_int, c_ptr, c_char
       character(kind=c_char), dimension(*), intent(in) :: yaml
       type(c_ptr), intent(out) :: out
     end function c_haar_open_yaml
     integer(c_int) function c_haar_close(h) bind(C, name="haar_close")
       import :: c_int, c_ptr
       type(c_ptr), value :: h
     end function c_haar_close
     integer(c_int) function c_haar_flush(h) bind(C, name="haar_flush")
       import :: c_int, c_ptr
       type(c_ptr), value :: h
     end function c_haar_flush
     integer(c_int) function c_haar_archive_str(h, key, data, len) bind(C, name="haar_archive_str")
       import :: c_int, c_ptr, c_char, c_size_t
       type(c_ptr), value :: h
       character(kind=c_char), dimension(*), intent(in) :: key
       type(c_ptr), value :: data
       integer(c_size_t), value :: len
     end function c_haar_archive_str
     integer(c_int) function c_haar_archive_grib(h, buf, len, fields) bind(C, name="haar_archive_grib")
       import :: c_int, c_ptr, c_size_t
       type(c_ptr), value :: h
       type(c_ptr), value :: buf
       integer(c_size_t), value :: len
       integer(c_size_t), intent(out) :: fields
     end function c_haar_archive_grib
     integer(c_int) function c_haar_retrieve(h, request, reader) bind(C, name="haar_retrieve")
       import :: c_int, c_ptr, c_char
       type(c_ptr), value :: h
       character(kind=c_char), dimension(*), intent(in) :: request
       type(c_ptr), intent(out) :: reader
     end function c_haar_retrieve
     integer(c_int) function c_haar_reader_size(reader, size) bind(C, name="haar_reader_size")
       import :: c_int, c_ptr, c_int64_t
       type(c_ptr), value :: reader
       integer(c_int64_t), intent(out) :: size
     end function c_haar_reader_size
     integer(c_int) function c_haar_reader_read(reader, buf, len, nread) bind(C, name="haar_reader_read")
       import :: c_int, c_ptr, c_size_t
       type(c_ptr), value :: reader
       type(c_ptr), value :: buf
       integer(c_size_t), value :: len
       integer(c_size_t), intent(out) :: nread
     end function c_haar_reader_read
     integer(c_int) function c_haar_reader_free(reader) bind(C, name="haar_reader_free")
       import :: c_int, c_ptr
       type(c_ptr), value :: reader
     end function c_haar_reader_free
     integer(c_int) function c_haar_list(h, request, it) bind(C, name="haar_list")
       import :: c_int, c_ptr, c_char
       type(c_ptr), value :: h
       character(kind=c_char), dimension(*), intent(in) :: request
       type(c_ptr), intent(out) :: it
     end function c_haar_list
     integer(c_int) function c_haar_list_count(it, count) bind(C, name="haar_list_count")
       import :: c_int, c_ptr, c_size_t
       type(c_ptr), value :: it
       integer(c_size_t), intent(out) :: count
     end function c_haar_list_count
     integer(c_int) function c_haar_list_free(it) bind(C, name="haar_list_free")
       import :: c_int, c_ptr
       type(c_ptr), value :: it
     end function c_haar_list_free
     integer(c_int) function c_haar_wait(h, request, timeout_s, fields) bind(C, name="haar_wait")
       import :: c_int, c_ptr, c_char, c_double, c_size_t
       type(c_ptr), value :: h
       character(kind=c_char), dimension(*), intent(in) :: request
       real(c_double), value :: timeout_s
       integer(c_size_t), intent(out) :: fields
     end function c_haar_wait
     type(c_ptr) function c_haar_last_error() bind(C, name="haar_last_error")
       import :: c_ptr
     end function c_haar_last_error
     type(c_ptr) function c_haar_version() bind(C, name="haar_version")
       import :: c_ptr
     end function c_haar_version
     integer(c_size_t) function c_strlen(s) bind(C, name="strlen")
       import :: c_size_t, c_ptr
       type(c_ptr), value :: s
     end function c_strlen
  end interface

contains

  !> A Fortran string as a NUL-terminated C string (trailing blanks dropped).
  pure function c_str(s) result(c)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=:), allocatable :: c
    c = trim(s) // c_null_char
  end function c_str

  !> A C string (owned by libhaar) as a Fortran string.
  function f_str(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer(c_size_t) :: n, i
    if (.not. c_associated(p)) then
       s = ""
       return
    end if
    n = c_strlen(p)
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: s)
    do i = 1, n
       s(i:i) = chars(i)
    end do
  end function f_str

  !> The message of this thread's last failed call.
  function haar_error_message() result(msg)
    character(len=:), allocatable :: msg
    if (allocated(local_error)) then
       if (len(local_error) > 0) then
          msg = local_error
          return
       end if
    end if
    msg = f_str(c_haar_last_error())
  end function haar_error_message

  !> libhaar's version.
  function haar_version() result(v)
    character(len=:), allocatable :: v
    v = f_str(c_haar_version())
  end function haar_version

  !> Opens the store a configuration file describes; without config_path, the environment's
  !> ($HAAR_CONFIG, FDB5's variables, else the defaults).
  integer function haar_open(store, config_path) result(status)
    type(haar_store), intent(out) :: store
    character(len=*), intent(in), optional :: config_path
    character(kind=c_char, len=:), allocatable, target :: path
    local_error = ""
    if (present(config_path)) then
       path = c_str(config_path)
       status = c_haar_open(c_loc(path), store%ptr)
    else
       status = c_haar_open(c_null_ptr, store%ptr)
    end if
  end function haar_open

  !> Opens the store a YAML configuration text describes.
  integer function haar_open_yaml(store, yaml) result(status)
    type(haar_store), intent(out) :: store
    character(len=*), intent(in) :: yaml
    local_error = ""
    status = c_haar_open_yaml(c_str(yaml), store%ptr)
  end function haar_open_yaml

  !> Closes the store (unflushed fields are dropped: flush first).
  integer function haar_close(store) result(status)
    type(haar_store), intent(inout) :: store
    local_error = ""
    status = c_haar_close(store%ptr)
    store%ptr = c_null_ptr
  end function haar_close

  !> Makes every field archived so far durable and visible.
  integer function haar_flush(store) result(status)
    type(haar_store), intent(in) :: store
    local_error = ""
    status = c_haar_flush(store%ptr)
  end function haar_flush

  !> Archives a real(4) array (its bytes, native order) under key ("class=od,...").
  integer function haar_archive_real32(store, key, values) result(status)
    type(haar_store), intent(in) :: store
    character(len=*), intent(in) :: key
    real(c_float), intent(in), target, contiguous :: values(:)
    local_error = ""
    status = c_haar_archive_str(store%ptr, c_str(key), c_loc(values), &
         int(size(values), c_size_t) * c_sizeof(values(1)))
  end function haar_archive_real32

  !> Archives a real(8) array (its bytes, native order) under key.
  integer function haar_archive_real64(store, key, values) result(status)
    type(haar_store), intent(in) :: store
    character(len=*), intent(in) :: key
    real(c_double), intent(in), target, contiguous :: values(:)
    local_error = ""
    status = c_haar_archive_str(store%ptr, c_str(key), c_loc(values), &
         int(size(values), c_size_t) * c_sizeof(values(1)))
  end function haar_archive_real64

  !> Archives GRIB messages (bytes back to back), keyed by ecCodes; nfields receives the
  !> number archived. All or nothing.
  integer function haar_archive_grib(store, bytes, nfields) result(status)
    type(haar_store), intent(in) :: store
    character(kind=c_char), intent(in), target, contiguous :: bytes(:)
    integer, intent(out) :: nfields
    integer(c_size_t) :: n
    local_error = ""
    status = c_haar_archive_grib(store%ptr, c_loc(bytes), int(size(bytes), c_size_t), n)
    nfields = int(n)
  end function haar_archive_grib

  !> Retrieves the fields of request into buf (at most size(buf) bytes); nbytes receives the
  !> size retrieved. A field missing, or more bytes than buf holds, is an error.
  integer function retrieve_into(store, request, buf, capacity, nbytes) result(status)
    type(haar_store), intent(in) :: store
    character(len=*), intent(in) :: request
    type(c_ptr), intent(in) :: buf
    integer(c_size_t), intent(in) :: capacity
    integer(c_size_t), intent(out) :: nbytes
    type(c_ptr) :: reader
    integer(c_int64_t) :: size
    integer(c_int) :: rc
    local_error = ""
    nbytes = 0
    status = c_haar_retrieve(store%ptr, c_str(request), reader)
    if (status /= HAAR_OK) return
    status = c_haar_reader_size(reader, size)
    if (status == HAAR_OK .and. size > capacity) then
       status = HAAR_ERR_INPUT
       local_error = "retrieve " // trim(request) // &
            ": the fields hold more bytes than the array given"
    else if (status == HAAR_OK) then
       status = c_haar_reader_read(reader, buf, capacity, nbytes)
    end if
    rc = c_haar_reader_free(reader)
  end function retrieve_into

  !> Retrieves request into a real(4) array; n receives the number of values.
  integer function haar_retrieve_real32(store, request, values, n) result(status)
    type(haar_store), intent(in) :: store
    character(len=*), intent(in) :: request
    real(c_float), intent(inout), target, contiguous :: values(:)
    integer, intent(out) :: n
    integer(c_size_t) :: nbytes
    local_error = ""
    status = retrieve_into(store, request, c_loc(values), &
         int(size(values), c_size_t) * c_sizeof(values(1)), nbytes)
    n = int(nbytes / c_sizeof(values(1)))
  end function haar_retrieve_real32

  !> Retrieves request into a real(8) array; n receives the number of values.
  integer function haar_retrieve_real64(store, request, values, n) result(status)
    type(haar_store), intent(in) :: store
    character(len=*), intent(in) :: request
    real(c_double), intent(inout), target, contiguous :: values(:)
    integer, intent(out) :: n
    integer(c_size_t) :: nbytes
    local_error = ""
    status = retrieve_into(store, request, c_loc(values), &
         int(size(values), c_size_t) * c_sizeof(values(1)), nbytes)
    n = int(nbytes / c_sizeof(values(1)))
  end function haar_retrieve_real64

  !> The number of flushed fields matching request ("" for all).
  integer function haar_list_count(store, request, count) result(status)
    type(haar_store), intent(in) :: store
    character(len=*), intent(in) :: request
    integer, intent(out) :: count
    type(c_ptr) :: it
    integer(c_size_t) :: n
    integer(c_int) :: rc
    local_error = ""
    count = 0
    status = c_haar_list(store%ptr, c_str(request), it)
    if (status /= HAAR_OK) return
    status = c_haar_list_count(it, n)
    count = int(n)
    rc = c_haar_list_free(it)
  end function haar_list_count

  !> Blocks until every field of request is flushed (HAAR_OK) or timeout_s seconds pass
  !> (HAAR_ERR_TIMEOUT, the message naming the missing keys).
  integer function haar_wait(store, request, timeout_s, nfields) result(status)
    type(haar_store), intent(in) :: store
    character(len=*), intent(in) :: request
    real(8), intent(in) :: timeout_s
    integer, intent(out) :: nfields
    integer(c_size_t) :: n
    local_error = ""
    status = c_haar_wait(store%ptr, c_str(request), real(timeout_s, c_double), n)
    nfields = int(n)
  end function haar_wait

end module haar
